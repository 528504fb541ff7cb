// The txnsim-conform/v1 adapter for franz-go (github.com/twmb/franz-go/pkg/kgo); see README.md.
//
// It reads one request line on stdin, consumes the one partition it names directly (kgo.ConsumePartitions:
// no group, nothing committed) from the start offset at the requested isolation level
// (kgo.FetchIsolationLevel), and prints the client line, one line per record PollRecords handed over, and a
// last line saying that kgo cannot tell its position (see README.md for why). Nothing is logged: kgo logs
// only through a logger the application gives it, and this one gives none, so stdout holds only the
// contract's lines.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	format     = "txnsim-conform/v1"
	clientName = "franz-go"
	modulePath = "github.com/twmb/franz-go"
	// One poll waits at most this long, so that the stop conditions are checked often even when the client
	// hands over nothing (a fetch of markers or aborted data only moves kgo's internal cursor).
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
	var level kgo.IsolationLevel
	switch *req.Isolation {
	case "read_committed":
		level = kgo.ReadCommitted()
	case "read_uncommitted":
		level = kgo.ReadUncommitted()
	default:
		fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
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
		// one end of it: the request names where the read starts.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	if err != nil {
		fail("creating the client: %v", err)
	}
	closed := make(chan struct{})
	defer func() {
		go func() { cl.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(closeBound):
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
		sliceEnd := now.Add(pollSlice)
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
			fail("fetching %s[%d]: %v", fe.Topic, fe.Partition, fe.Err)
		}
		// Every record handed over is printed, in the order kgo handed them over.
		fetches.EachRecord(func(r *kgo.Record) {
			l := recordLine{Offset: r.Offset}
			if r.Value != nil {
				l.Value = text(r.Value, "value", r.Offset)
			}
			if r.Key != nil {
				l.Key = text(r.Key, "key", r.Offset)
			}
			emit(l)
			delivered++
			if r.Offset+1 > next {
				next = r.Offset + 1
			}
		})
	}
	emit(map[string]any{"position": nil, "why": "franz-go's kgo client has no position API for directly consumed partitions " +
		"(ConsumePartitions): its fetch cursor is internal, and UncommittedOffsets covers group consuming only"})
}
