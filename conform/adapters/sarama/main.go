// The txnsim-conform/v1 adapter for IBM/sarama (github.com/IBM/sarama); see README.md.
//
// It reads one adapter.Request line on stdin, consumes the one partition it names with a PartitionConsumer (no
// group, nothing committed) from the start offset at the requested isolation level
// (Config.Consumer.IsolationLevel), and prints the client line, one line per message the Messages()
// channel handed over, and a last line saying that sarama cannot tell its position (see README.md).
// sarama logs only through sarama.Logger, which discards by default and is pointed at stderr here, so
// stdout holds only the contract's lines.
package main

import (
	"log"
	"os"
	"time"
	"txnsim-conform/adapter"

	"github.com/IBM/sarama"
)

const (
	clientName = "sarama"
	modulePath = "github.com/IBM/sarama"
)

func main() {
	started := time.Now()
	req := adapter.Start(clientName, modulePath)
	cfg := sarama.NewConfig()
	switch *req.Isolation {
	case "read_committed":
		cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	case "read_uncommitted":
		cfg.Consumer.IsolationLevel = sarama.ReadUncommitted
	default:
		adapter.Fail("bad request: isolation is %q, not read_committed or read_uncommitted", *req.Isolation)
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
		adapter.Fail("creating the consumer: %v", err)
	}
	// No group: ConsumePartition starts at exactly this offset and commits nothing. An offset outside the
	// log fails here (ErrOffsetOutOfRange) rather than moving to one end of it.
	pc, err := consumer.ConsumePartition(*req.Topic, *req.Partition, *req.StartOffset)
	if err != nil {
		adapter.Fail("ConsumePartition(%s, %d, %d): %v", *req.Topic, *req.Partition, *req.StartOffset, err)
	}
	defer func() {
		// Bounded: the process exits after adapter.CloseBound even if the consumer has not finished closing.
		closed := make(chan struct{})
		go func() { pc.AsyncClose(); consumer.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(adapter.CloseBound):
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
		wait := adapter.PollSlice
		if remaining < wait {
			wait = remaining
		}
		timer := time.NewTimer(wait)
		select {
		case m, ok := <-pc.Messages():
			timer.Stop()
			if !ok {
				adapter.Fail("the PartitionConsumer closed its Messages() channel")
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
			if m.Offset+1 > next {
				next = m.Offset + 1
			}
		case ce, ok := <-pc.Errors():
			timer.Stop()
			if ok {
				adapter.Fail("consuming %s[%d]: %v", ce.Topic, ce.Partition, ce.Err)
			}
		case <-timer.C:
		}
	}
	adapter.Emit(map[string]any{"position": nil, "why": "sarama's PartitionConsumer has no position API: its next fetch offset " +
		"is internal, and it exposes only Messages(), Errors() and HighWaterMarkOffset()"})
}
