// The txnsim-conform/v1 adapter for IBM/sarama (github.com/IBM/sarama); see README.md.
//
// It reads one request line on stdin, consumes the one partition it names with a PartitionConsumer (no
// group, nothing committed) from the start offset at the requested isolation level
// (Config.Consumer.IsolationLevel), and prints the client line, one line per message the Messages()
// channel handed over, and a last line saying that sarama cannot tell its position (see README.md).
// sarama logs only through sarama.Logger, which discards by default and is pointed at stderr here, so
// stdout holds only the contract's lines.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
)

const (
	format     = "txnsim-conform/v1"
	clientName = "sarama"
	modulePath = "github.com/IBM/sarama"
	// One poll waits at most this long, so that the stop conditions are checked often even when the client
	// hands over nothing (a fetch of markers or aborted data only moves sarama's internal cursor).
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
	cfg := sarama.NewConfig()
	switch *req.Isolation {
	case "read_committed":
		cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	case "read_uncommitted":
		cfg.Consumer.IsolationLevel = sarama.ReadUncommitted
	default:
		fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
	}
	deadline := started.Add(time.Duration(*req.TimeoutMs) * time.Millisecond)
	// The library's own messages (connections, retries) go to stderr, where the runner keeps them.
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags)
	cfg.ClientID = "txnsim-conform-sarama"
	// Errors come on the PartitionConsumer's Errors() channel, where the adapter reports them, instead of
	// only being logged.
	cfg.Consumer.Return.Errors = true
	// cfg.Version stays sarama's default (V2_8_0_0, at least 0.11, which read_committed needs): what an
	// application that does not set it gets.

	consumer, err := sarama.NewConsumer([]string{*req.Bootstrap}, cfg)
	if err != nil {
		fail("creating the consumer: %v", err)
	}
	// No group: ConsumePartition starts at exactly this offset and commits nothing. An offset outside the
	// log fails here (ErrOffsetOutOfRange) rather than moving to one end of it.
	pc, err := consumer.ConsumePartition(*req.Topic, *req.Partition, *req.StartOffset)
	if err != nil {
		fail("ConsumePartition(%s, %d, %d): %v", *req.Topic, *req.Partition, *req.StartOffset, err)
	}
	defer func() {
		// Bounded: the process exits after closeBound even if the consumer has not finished closing.
		closed := make(chan struct{})
		go func() { pc.AsyncClose(); consumer.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(closeBound):
		}
	}()

	// sarama cannot say where its cursor is, so the only sign of having reached stop_offset that it
	// gives is a delivered message at or past stop_offset - 1. A range whose tail sarama filters (aborted
	// data, markers) therefore runs until timeout_ms.
	var delivered int64
	next := *req.StartOffset // one past the last delivered message
	for next < *req.StopOffset && delivered < *req.MaxRecords {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		wait := pollSlice
		if remaining < wait {
			wait = remaining
		}
		timer := time.NewTimer(wait)
		select {
		case m, ok := <-pc.Messages():
			timer.Stop()
			if !ok {
				fail("the PartitionConsumer closed its Messages() channel")
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
			if m.Offset+1 > next {
				next = m.Offset + 1
			}
		case ce, ok := <-pc.Errors():
			timer.Stop()
			if ok {
				fail("consuming %s[%d]: %v", ce.Topic, ce.Partition, ce.Err)
			}
		case <-timer.C:
		}
	}
	emit(map[string]any{"position": nil, "why": "sarama's PartitionConsumer has no position API: its next fetch offset " +
		"is internal, and it exposes only Messages(), Errors() and HighWaterMarkOffset()"})
}
