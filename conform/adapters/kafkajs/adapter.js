'use strict'
// The txnsim-conform/v1 adapter for kafkajs; see README.md.
//
// kafkajs reads only through a consumer group (it has no assign or position API), so this adapter joins a
// group of its own with a fresh id, subscribes to the topic, seeks the partition to the start offset
// with consumer.seek, commits nothing (autoCommit: false), and prints the client line, one line per
// message of each batch that eachBatch was handed, and as its position one past the lastOffset of the
// last END_BATCH_PROCESS event for the partition: kafkajs resolves that offset after every batch it
// processes, including batches that its filter emptied (aborted data, markers), and fetches next from
// the offset after it. kafkajs's logs go to stderr through a logCreator of the adapter's, so stdout holds
// only the contract's lines.

const fs = require('fs')
const path = require('path')
// The protocol's framing, shared with the other Node adapter (../node/; install copies it beside this file).
const { emit, fail, parseRequest, readLine, bounded } = require('./txnsim-conform.cjs')

const CLIENT = 'kafkajs'
// How often the adapter checks its stop conditions while kafkajs fetches on its own.
const CHECK_MS = 50
// Stopping and disconnecting are bounded: the process exits after this even if kafkajs has not finished.
const CLOSE_BOUND_MS = 3000
const boundedClose = promise => bounded(promise, CLOSE_BOUND_MS)

// The installed package's own version (package-lock.json's pin), read from its package.json.
function clientVersion () {
  const pkg = path.join(path.dirname(require.resolve('kafkajs')), 'package.json')
  return JSON.parse(fs.readFileSync(pkg, 'utf8')).version
}

// A key or value as the contract's UTF-8 string; bytes that are not UTF-8 are an error (with the offset)
// rather than a silently altered value (Buffer.toString would put U+FFFD in their place).
const decoder = new TextDecoder('utf-8', { fatal: true })
function text (buf, what, offset) {
  try {
    return decoder.decode(buf)
  } catch (e) {
    throw new Error(`the ${what} at offset ${offset} is not UTF-8`)
  }
}

async function main () {
  const started = Date.now()
  // The client line comes first whatever follows.
  emit({ client: CLIENT, version: clientVersion() })
  let req
  try {
    req = parseRequest(readLine())
  } catch (e) {
    fail(`bad request: ${e.message}`)
  }
  const deadline = started + req.timeout_ms

  const { Kafka, logLevel } = require('kafkajs')
  const kafka = new Kafka({
    clientId: 'txnsim-conform-kafkajs',
    brokers: [req.bootstrap],
    logLevel: logLevel.INFO,
    // kafkajs's default logger writes to stdout through console.info; stdout belongs to the contract.
    logCreator: () => ({ namespace, level, label, log }) => {
      process.stderr.write(`[kafkajs ${label}] ${namespace} ${JSON.stringify(log)}\n`)
    },
    // Connection attempts give up instead of retrying past the read's own time.
    retry: { retries: 3 }
  })
  const consumer = kafka.consumer({
    // A group nobody else uses: kafkajs consumes only through a group (see README.md).
    groupId: `txnsim-conform-kafkajs-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`,
    // kafkajs's isolation switch: false (its default) is read_committed, true is read_uncommitted.
    readUncommitted: req.isolation === 'read_uncommitted',
    // A fetch that finds nothing new waits at most this long on the broker (kafkajs's default is 5 s);
    // disconnect() waits for the fetch in flight, so this keeps the end of a read short. It changes how
    // long the broker may hold an empty fetch, nothing about what is delivered.
    maxWaitTimeInMs: 500
  })

  let delivered = 0
  // Until a batch of the partition has been processed, kafkajs's next fetch is the seek's offset.
  let position = BigInt(req.start_offset)
  let crashed = null
  const { END_BATCH_PROCESS, CRASH } = consumer.events
  consumer.on(END_BATCH_PROCESS, ({ payload }) => {
    if (payload.topic === req.topic && payload.partition === req.partition && payload.lastOffset != null) {
      // kafkajs resolved lastOffset as consumed after this batch (eachBatchAutoResolve), so it fetches
      // next from one past it.
      position = BigInt(payload.lastOffset) + 1n
    }
  })
  consumer.on(CRASH, ({ payload }) => {
    crashed = payload.error
  })

  const done = () => position >= BigInt(req.stop_offset) || delivered >= req.max_records || Date.now() >= deadline
  try {
    await consumer.connect()
    // fromBeginning only matters until the seek below takes effect: the group has no committed offset.
    await consumer.subscribe({ topics: [req.topic], fromBeginning: true })
    await consumer.run({
      // Nothing is committed: the read leaves no trace in the group.
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        // The group is given every partition of the topic; only the one asked for is read here.
        if (batch.partition !== req.partition || done()) return
        for (const m of batch.messages) {
          let line
          try {
            line = { offset: Number(m.offset), value: m.value === null ? null : text(m.value, 'value', m.offset) }
            if (m.key !== null && m.key !== undefined) line.key = text(m.key, 'key', m.offset)
          } catch (e) {
            // Straight to the error line: thrown from here, kafkajs would log it and retry the batch.
            fail(e.message)
          }
          emit(line)
          delivered++
        }
      }
    })
    // seek after run (kafkajs's rule): it takes effect when the partition is assigned.
    consumer.seek({ topic: req.topic, partition: req.partition, offset: String(req.start_offset) })
    while (!done() && crashed === null) {
      await new Promise(resolve => setTimeout(resolve, CHECK_MS))
    }
    if (crashed !== null) fail(`kafkajs's consumer crashed: ${crashed}`)
    emit({ position: Number(position) })
  } finally {
    await boundedClose(consumer.disconnect())
  }
}

main().then(() => process.exit(0), e => fail(`${e.name}: ${e.message}`))
