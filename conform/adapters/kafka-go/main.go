// The txnsim-conform/v1 adapter for segmentio/kafka-go (github.com/segmentio/kafka-go); see README.md.
//
// It reads one adapter.Request line on stdin, reads the one partition it names with a kafka.Reader that has a
// Partition and no GroupID (no group, nothing committed), SetOffset to the start offset, at the requested
// IsolationLevel, and prints the client line, one line per message FetchMessage handed over, and the
// Reader's own Offset() after the last one. kafka-go's error logger is pointed at stderr and its chatty
// logger left off, so stdout holds only the contract's lines.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"
	"txnsim-conform/adapter"

	"github.com/segmentio/kafka-go"
)

const (
	clientName = "kafka-go"
	modulePath = "github.com/segmentio/kafka-go"
)

// kafka-go's Reader reports most failures (an offset out of range among them) only to its ErrorLogger and
// keeps retrying, so FetchMessage just waits. The adapter keeps the last such message: a read that ends
// short of stop_offset after one was logged ends with it as the error line, not as a quiet position.
type errorLog struct {
	mu   sync.Mutex
	last string
	out  *log.Logger
}

func (e *errorLog) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.out.Print(msg)
	e.mu.Lock()
	e.last = msg
	e.mu.Unlock()
}

func (e *errorLog) lastMessage() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

var errs = &errorLog{out: log.New(os.Stderr, "[kafka-go] ", log.LstdFlags)}

func main() {
	started := time.Now()
	req := adapter.Start(clientName, modulePath)
	var level kafka.IsolationLevel
	switch *req.Isolation {
	case "read_committed":
		level = kafka.ReadCommitted
	case "read_uncommitted":
		level = kafka.ReadUncommitted
	default:
		adapter.Fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
	}
	deadline := started.Add(time.Duration(*req.TimeoutMs) * time.Millisecond)

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   []string{*req.Bootstrap},
		Topic:     *req.Topic,
		Partition: int(*req.Partition),
		// No GroupID: the Reader reads this one partition from the offset set below, and commits nothing.
		IsolationLevel: level,
		// A fetch that finds nothing new waits at most this long on the broker (the default is 10 s), so
		// that a read which has caught up notices its deadline soon.
		MaxWait:     500 * time.Millisecond,
		ErrorLogger: kafka.LoggerFunc(errs.logf),
	})
	closed := make(chan struct{})
	defer func() {
		// Bounded: the process exits after adapter.CloseBound even if the Reader has not finished closing.
		go func() { r.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(adapter.CloseBound):
		}
	}()
	if err := r.SetOffset(*req.StartOffset); err != nil {
		adapter.Fail("SetOffset(%d): %v", *req.StartOffset, err)
	}

	// Reader.Offset() is kafka-go's own position for a Reader without a group: one past the last message
	// that FetchMessage returned (or the offset set, before the first).
	var delivered int64
	for r.Offset() < *req.StopOffset && delivered < *req.MaxRecords {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		sliceEnd := now.Add(adapter.PollSlice)
		if sliceEnd.After(deadline) {
			sliceEnd = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), sliceEnd)
		m, err := r.FetchMessage(ctx)
		cancel()
		if err != nil {
			// The slice's own deadline ending a wait is not a failure of the read.
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				continue
			}
			adapter.Fail("FetchMessage: %v", err)
		}
		if m.Partition != int(*req.Partition) || m.Topic != *req.Topic {
			adapter.Fail("FetchMessage returned %s[%d], not the partition asked for", m.Topic, m.Partition)
		}
		l := adapter.RecordLine{Offset: m.Offset}
		if m.Value != nil {
			l.Value = adapter.Text(m.Value, "value", m.Offset)
		}
		if m.Key != nil {
			l.Key = adapter.Text(m.Key, "key", m.Offset)
		}
		adapter.Emit(l)
		delivered++
	}
	position := r.Offset()
	if position < *req.StopOffset && delivered < *req.MaxRecords {
		if msg := errs.lastMessage(); msg != "" {
			adapter.Fail("the read ended at offset %d, short of stop_offset %d, after kafka-go's Reader logged: %s",
				position, *req.StopOffset, msg)
		}
	}
	adapter.Emit(map[string]int64{"position": position})
}
