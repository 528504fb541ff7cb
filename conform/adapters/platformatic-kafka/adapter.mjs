// The txnsim-conform/v1 adapter for @platformatic/kafka; see README.md.
//
// @platformatic/kafka's Consumer always belongs to a group (groupId is required, and consume() joins it),
// so this adapter joins a group of its own with a fresh id and consumes the topic in the stream's MANUAL
// mode, which starts the partition at the offset given (no committed offset is looked up), with
// autocommit off. It prints the client line, one line per message the stream emitted, and as its position
// the stream's own offsetsToFetch for the partition: the offset its next Fetch asks for. The library logs
// only through the `debug` package, to stderr and only when DEBUG asks for it, so stdout holds only the
// contract's lines.

import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
// The protocol's framing, shared with the other Node adapter (../node/; install copies it beside this file).
import { emit, fail, parseRequest, readLine, bounded } from './txnsim-conform.cjs'

const CLIENT = '@platformatic/kafka'
// How often the adapter checks its stop conditions while the stream fetches on its own.
const CHECK_MS = 50
// Closing is bounded: the process exits after this even if the library has not finished.
const CLOSE_BOUND_MS = 3000
const boundedClose = promise => bounded(promise, CLOSE_BOUND_MS)

// The installed package's own version (package-lock.json's pin), read from its package.json: the
// package's exports map does not export package.json, so it is found beside its resolved entry point.
function clientVersion () {
  const require = createRequire(import.meta.url)
  let dir = dirname(require.resolve('@platformatic/kafka'))
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'))
      if (pkg.name === CLIENT) return pkg.version
    } catch (e) {
      if (e.code !== 'ENOENT') throw e
    }
    if (dirname(dir) === dir) return 'unknown'
    dir = dirname(dir)
  }
}

// A key or value as the contract's UTF-8 string; bytes that are not UTF-8 are an error (with the offset)
// rather than a silently altered value (Buffer.toString would put U+FFFD in their place).
const decoder = new TextDecoder('utf-8', { fatal: true })
function text (buf, what, offset) {
  try {
    return decoder.decode(buf)
  } catch (e) {
    fail(`the ${what} at offset ${offset} is not UTF-8`)
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

  // Imported after the client line so that a failure to load still reports as an error line.
  const { Consumer, FetchIsolationLevels, MessagesStreamFallbackModes, MessagesStreamModes } = await import('@platformatic/kafka')
  const consumer = new Consumer({
    clientId: 'txnsim-conform-platformatic-kafka',
    bootstrapBrokers: [req.bootstrap],
    // A group nobody else uses: the library consumes only through a group (see README.md).
    groupId: `txnsim-conform-platformatic-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`,
    // Nothing is committed: the read leaves no trace in the group.
    autocommit: false
  })
  const key = `${req.topic}:${req.partition}`
  let stream = null
  let delivered = 0
  let failed = null
  // The stream's next fetch offset for the partition, or the start offset before the stream exists.
  const position = () => (stream?.offsetsToFetch.get(key) ?? BigInt(req.start_offset))
  // Stop only once every message the stream has buffered was emitted, so that none it fetched is left out.
  const done = () =>
    delivered >= req.max_records ||
    Date.now() >= deadline ||
    (position() >= BigInt(req.stop_offset) && (stream === null || stream.readableLength === 0))
  try {
    stream = await consumer.consume({
      topics: [req.topic],
      // MANUAL: fetch from exactly these offsets, never from a committed offset or an end of the log.
      mode: MessagesStreamModes.MANUAL,
      // A fetch error (OFFSET_OUT_OF_RANGE among them, once the library's own retries are spent) ends the
      // stream with that error, which the adapter prints, instead of moving to an end of the log.
      fallbackMode: MessagesStreamFallbackModes.FAIL,
      offsets: [{ topic: req.topic, partition: req.partition, offset: BigInt(req.start_offset) }],
      autocommit: false,
      isolationLevel: req.isolation === 'read_committed'
        ? FetchIsolationLevels.READ_COMMITTED
        : FetchIsolationLevels.READ_UNCOMMITTED
    })
    stream.on('error', e => { failed = e })
    stream.on('data', m => {
      // The group is given every partition of the topic; only the one asked for is read here.
      if (m.topic !== req.topic || m.partition !== req.partition) return
      if (delivered >= req.max_records) return
      // Without deserializers a key or value is a Buffer, or undefined for a null one.
      const line = { offset: Number(m.offset), value: m.value == null ? null : text(m.value, 'value', m.offset) }
      if (m.key != null) line.key = text(m.key, 'key', m.offset)
      emit(line)
      delivered++
      // Stop the stream handing over more once the count is reached.
      if (delivered >= req.max_records) stream.pause()
    })
    while (!done() && failed === null) {
      await new Promise(resolve => setTimeout(resolve, CHECK_MS))
    }
    if (failed !== null) fail(`the stream failed: ${failed.message ?? failed}`)
    emit({ position: Number(position()) })
  } finally {
    if (stream !== null) await boundedClose(stream.close())
    await boundedClose(consumer.close(true))
  }
}

main().then(() => process.exit(0), e => fail(`${e.name}: ${e.message}`))
