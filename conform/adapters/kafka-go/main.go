// The txnsim-conform/v1 adapter for segmentio/kafka-go (github.com/segmentio/kafka-go); see README.md.
//
// It reads one request line on stdin, reads the one partition it names with a kafka.Reader that has a
// Partition and no GroupID (no group, nothing committed), SetOffset to the start offset, at the requested
// IsolationLevel, and prints the client line, one line per message FetchMessage handed over, and the
// Reader's own Offset() after the last one. kafka-go's error logger is pointed at stderr and its chatty
// logger left off, so stdout holds only the contract's lines.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

const (
	format     = "txnsim-conform/v1"
	clientName = "kafka-go"
	modulePath = "github.com/segmentio/kafka-go"
	// One poll waits at most this long, so that the stop conditions are checked often even when the client
	// hands over nothing (a fetch of markers or aborted data delivers nothing).
	pollSlice = 200 * time.Millisecond
	// Close is bounded: the process exits after this even if the client has not finished closing.
	closeBound = 2 * time.Second
)

// The request's fields; pointers so that a missing one is told from a zero.
type request struct {
	Format      *string `json:"format"`
	Bootstrap   *string `json:"bootstrap"`
	Topic       *string `json:"topic"`
	Partition   *int32  `json:"partition"`
	StartOffset *int64  `json:"start_offset"`
	Isolation   *string `json:"isolation"`
	StopOffset  *int64  `json:"stop_offset"`
	MaxRecords  *int64  `json:"max_records"`
	TimeoutMs   *int64  `json:"timeout_ms"`
}

// Struct fields keep the contract's key order (offset, value, key).
type recordLine struct {
	Offset int64   `json:"offset"`
	Value  *string `json:"value"`
	Key    *string `json:"key,omitempty"`
}

var out = bufio.NewWriter(os.Stdout)

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the adapter's own types are marshalled; this cannot happen short of a bug here.
		b = []byte(`{"error":"marshalling an output line failed"}`)
	}
	out.Write(b)
	out.WriteByte('\n')
	// Flushed line by line, so that a runner that kills a slow adapter still sees what was delivered.
	out.Flush()
}

func fail(format string, args ...any) {
	// One line: newlines in an error's text would break the contract's line framing.
	emit(map[string]string{"error": strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")})
	os.Exit(1)
}

// The version of the module this binary was built with: go.mod's pin, as the build recorded it.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == modulePath {
				if dep.Replace != nil {
					return dep.Replace.Version
				}
				return dep.Version
			}
		}
	}
	return "unknown"
}

func parseRequest(line []byte) (request, error) {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return req, err
	}
	if req.Format == nil || *req.Format != format {
		return req, fmt.Errorf("format is missing or not %s", format)
	}
	for name, p := range map[string]*string{"bootstrap": req.Bootstrap, "topic": req.Topic, "isolation": req.Isolation} {
		if p == nil {
			return req, fmt.Errorf("%s is missing", name)
		}
	}
	if req.Partition == nil || *req.Partition < 0 {
		return req, errors.New("partition is missing or negative")
	}
	for name, p := range map[string]*int64{"start_offset": req.StartOffset, "stop_offset": req.StopOffset,
		"max_records": req.MaxRecords, "timeout_ms": req.TimeoutMs} {
		if p == nil || *p < 0 {
			return req, fmt.Errorf("%s is missing or negative", name)
		}
	}
	return req, nil
}

// A key or value as the contract's UTF-8 string; bytes that are not UTF-8 are an error (with the offset)
// rather than a silently altered value (encoding/json would replace them with U+FFFD).
func text(raw []byte, what string, offset int64) *string {
	if !utf8.Valid(raw) {
		fail("the %s at offset %d is not UTF-8", what, offset)
	}
	s := string(raw)
	return &s
}

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
	// The client line comes first whatever follows.
	emit(map[string]string{"client": clientName, "version": moduleVersion()})
	line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		fail("bad request: reading stdin: %v", err)
	}
	req, err := parseRequest(line)
	if err != nil {
		fail("bad request: %v", err)
	}
	var level kafka.IsolationLevel
	switch *req.Isolation {
	case "read_committed":
		level = kafka.ReadCommitted
	case "read_uncommitted":
		level = kafka.ReadUncommitted
	default:
		fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
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
		// Bounded: the process exits after closeBound even if the Reader has not finished closing.
		go func() { r.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(closeBound):
		}
	}()
	if err := r.SetOffset(*req.StartOffset); err != nil {
		fail("SetOffset(%d): %v", *req.StartOffset, err)
	}

	// Reader.Offset() is kafka-go's own position for a Reader without a group: one past the last message
	// that FetchMessage returned (or the offset set, before the first).
	var delivered int64
	for r.Offset() < *req.StopOffset && delivered < *req.MaxRecords {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		sliceEnd := now.Add(pollSlice)
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
			fail("FetchMessage: %v", err)
		}
		if m.Partition != int(*req.Partition) || m.Topic != *req.Topic {
			fail("FetchMessage returned %s[%d], not the partition asked for", m.Topic, m.Partition)
		}
		l := recordLine{Offset: m.Offset}
		if m.Value != nil {
			l.Value = text(m.Value, "value", m.Offset)
		}
		if m.Key != nil {
			l.Key = text(m.Key, "key", m.Offset)
		}
		emit(l)
		delivered++
	}
	position := r.Offset()
	if position < *req.StopOffset && delivered < *req.MaxRecords {
		if msg := errs.lastMessage(); msg != "" {
			fail("the read ended at offset %d, short of stop_offset %d, after kafka-go's Reader logged: %s",
				position, *req.StopOffset, msg)
		}
	}
	emit(map[string]int64{"position": position})
}
