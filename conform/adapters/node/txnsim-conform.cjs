'use strict'
// The txnsim-conform/v1 protocol shared by the Node adapters (kafkajs, @platformatic/kafka): the request,
// the output lines and their framing (docs/conform.md has the contract); each adapter keeps only its
// client's read loop. CommonJS, so that both a CommonJS and an ES module adapter can load it.

const fs = require('fs')

const FORMAT = 'txnsim-conform/v1'

function emit (obj) {
  fs.writeSync(1, JSON.stringify(obj) + '\n')
}

function fail (message) {
  // The contract's error line is one line: newlines in an error's text would break it.
  emit({ error: String(message).split(/\s+/).join(' ').trim() })
  process.exit(1)
}

function parseRequest (line) {
  const req = JSON.parse(line)
  if (req === null || typeof req !== 'object' || Array.isArray(req)) throw new Error('the request is not a JSON object')
  if (req.format !== FORMAT) throw new Error(`format is ${JSON.stringify(req.format)}, this adapter speaks ${FORMAT}`)
  for (const key of ['bootstrap', 'topic', 'isolation']) {
    if (typeof req[key] !== 'string') throw new Error(`${key} is missing or not a string`)
  }
  for (const key of ['partition', 'start_offset', 'stop_offset', 'max_records', 'timeout_ms']) {
    if (!Number.isSafeInteger(req[key]) || req[key] < 0) throw new Error(`${key} is missing or not a non-negative integer`)
  }
  if (req.isolation !== 'read_committed' && req.isolation !== 'read_uncommitted') {
    throw new Error(`isolation is ${JSON.stringify(req.isolation)}, not read_committed or read_uncommitted`)
  }
  return req
}

function readLine () {
  // One line from stdin, read synchronously: the request is small, and the runner closes stdin after it.
  const chunks = []
  const buf = Buffer.alloc(65536)
  for (;;) {
    let n
    try {
      n = fs.readSync(0, buf, 0, buf.length, null)
    } catch (e) {
      if (e.code === 'EAGAIN') continue
      if (e.code === 'EOF') break
      throw e
    }
    if (n === 0) break
    chunks.push(Buffer.from(buf.subarray(0, n)))
    if (buf.subarray(0, n).includes(10)) break
  }
  return Buffer.concat(chunks).toString('utf8').split('\n')[0]
}

// A promise's end, or `ms` later, whichever comes first: closing a client is bounded.
function bounded (promise, ms) {
  return Promise.race([promise.catch(() => {}), new Promise(resolve => setTimeout(resolve, ms).unref())])
}

module.exports = { emit, fail, parseRequest, readLine, bounded }
