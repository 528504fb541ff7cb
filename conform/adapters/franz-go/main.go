// The txnsim-conform/v1 adapter for franz-go (github.com/twmb/franz-go/pkg/kgo); see README.md.
//
// It reads one adapter.Request line on stdin, consumes the one partition it names directly (kgo.ConsumePartitions:
// no group, nothing committed) from the start offset at the requested isolation level
// (kgo.FetchIsolationLevel), and prints the client line, one line per record PollRecords handed over, and a
// last line saying that kgo cannot tell its position (see README.md for why). Nothing is logged: kgo logs
// only through a logger the application gives it, and this one gives none, so stdout holds only the
// contract's lines.
package main

import (
	"context"
	"errors"
	"time"
	"txnsim-conform/adapter"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	clientName = "franz-go"
	modulePath = "github.com/twmb/franz-go"
)

func main() {
	started := time.Now()
	req := adapter.Start(clientName, modulePath)
	var level kgo.IsolationLevel
	switch *req.Isolation {
	case "read_committed":
		level = kgo.ReadCommitted()
	case "read_uncommitted":
		level = kgo.ReadUncommitted()
	default:
		adapter.Fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
	}
	deadline := started.Add(time.Duration(*req.TimeoutMs) * time.Millisecond)

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(*req.Bootstrap),
		kgo.ClientID("txnsim-conform-franz-go"),
		// Direct consuming of exactly this partition from exactly this offset: no group, no commits.
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			*req.Topic: {*req.Partition: kgo.NewOffset().At(*req.StartOffset)},
		}),
		kgo.FetchIsolationLevel(level),
		// A start offset outside the log stops the partition with an error instead of quietly moving to
		// one end of it: the adapter.Request names where the read starts.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	if err != nil {
		adapter.Fail("creating the client: %v", err)
	}
	closed := make(chan struct{})
	defer func() {
		go func() { cl.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(adapter.CloseBound):
		}
	}()

	// kgo cannot say where its cursor is, so the only sign of having reached stop_offset that it gives
	// is a delivered record at or past stop_offset - 1. A range whose tail kgo filters (aborted data,
	// markers) therefore runs until timeout_ms.
	var delivered int64
	next := *req.StartOffset // one past the last delivered record
	for next < *req.StopOffset && delivered < *req.MaxRecords {
		now := time.Now()
		if !now.Before(deadline) {
			break
		}
		sliceEnd := now.Add(adapter.PollSlice)
		if sliceEnd.After(deadline) {
			sliceEnd = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), sliceEnd)
		fetches := cl.PollRecords(ctx, int(*req.MaxRecords-delivered))
		cancel()
		for _, fe := range fetches.Errors() {
			// The slice's own deadline ending a poll is not a failure of the read.
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			adapter.Fail("fetching %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
		}
		// Every record handed over is printed, in the order kgo handed them over.
		fetches.EachRecord(func(r *kgo.Record) {
			l := adapter.RecordLine{Offset: r.Offset}
			if r.Value != nil {
				l.Value = adapter.Text(r.Value, "value", r.Offset)
			}
			if r.Key != nil {
				l.Key = adapter.Text(r.Key, "key", r.Offset)
			}
			adapter.Emit(l)
			delivered++
			if r.Offset+1 > next {
				next = r.Offset + 1
			}
		})
	}
	adapter.Emit(map[string]any{"position": nil, "why": "franz-go's kgo client has no position API for directly consumed partitions " +
		"(ConsumePartitions): its fetch cursor is internal, and UncommittedOffsets covers group consuming only"})
}
