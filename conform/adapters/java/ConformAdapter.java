// The txnsim-conform/v1 adapter for Kafka's Java client (kafka-clients), shared by every pinned version:
// conform/adapters/java-<version>/ each pin one kafka-clients in their pom.xml and compile this one file
// against it (conform/adapters/java/install). See conform/adapters/java/README.md.
//
// Reads one request line on stdin, reads the one partition it names with a KafkaConsumer that has no group
// (assign + seek, no offset commits) at the requested isolation level, and prints the client line, one line
// per record that poll() handed over, and the consumer's own position() after its last poll. stdout holds
// only those lines; the client logs through SLF4J, which has no binding on the classpath, so it logs nothing
// (SLF4J's own notice of that goes to stderr).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.AppInfoParser;

public class ConformAdapter {
    static final String FORMAT = "txnsim-conform/v1";
    static final String CLIENT = "kafka-clients";
    /** One poll waits at most this long, so the stop conditions are checked often even when a fetch of
     *  markers alone moves the position without delivering a record. */
    static final long POLL_SLICE_MS = 200;
    /** position() may need a round trip when the client has lost its position; it gets at least this much
     *  even when the read's own time is spent, so the last line reports rather than times out. */
    static final long POSITION_FLOOR_MS = 2000;

    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false,
            StandardCharsets.UTF_8);

    static class Failure extends Exception {
        Failure(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        long started = System.nanoTime();
        // The client line comes first whatever follows: the version of the kafka-clients jar on the
        // classpath, which is the pin of the pom.xml it was resolved from.
        emit(obj("client", CLIENT, "version", AppInfoParser.getVersion()));
        int code;
        try {
            code = read(started);
        } catch (Failure e) {
            emit(obj("error", oneLine(e.getMessage())));
            code = 1;
        } catch (Throwable e) {
            String said = String.valueOf(e.getMessage());
            String name = e.getClass().getSimpleName();
            emit(obj("error", oneLine(said.startsWith(name) ? said : name + ": " + said)));
            code = 1;
        }
        OUT.flush();
        // The consumer's network thread would keep the JVM up: the exit ends it.
        System.exit(code);
    }

    static int read(long started) throws Exception {
        String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        if (line == null) {
            throw new Failure("bad request: stdin was empty");
        }
        Map<String, Object> req;
        try {
            req = new Json(line).object();
        } catch (IllegalArgumentException e) {
            throw new Failure("bad request: " + e.getMessage());
        }
        if (!FORMAT.equals(req.get("format"))) {
            throw new Failure("bad request: format is " + Json.quote(String.valueOf(req.get("format")))
                    + ", this adapter speaks " + FORMAT);
        }
        String bootstrap = string(req, "bootstrap");
        String topic = string(req, "topic");
        String isolation = string(req, "isolation");
        int partition = (int) number(req, "partition");
        long start = number(req, "start_offset");
        long stop = number(req, "stop_offset");
        long maxRecords = number(req, "max_records");
        long timeoutMs = number(req, "timeout_ms");
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new Failure("bad request: isolation is " + Json.quote(isolation)
                    + ", not one of read_committed, read_uncommitted");
        }
        long deadline = started + timeoutMs * 1_000_000L;

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "txnsim-conform-kafka-clients");
        // No group: the read is assign + seek, and nothing is committed anywhere.
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", isolation);
        // A start offset outside the log fails the read (OffsetOutOfRangeException) instead of quietly
        // moving it to one end of the log: the request names where the read starts.
        p.put("auto.offset.reset", "none");
        // A read never creates the topic it was asked about.
        p.put("allow.auto.create.topics", "false");
        p.put("max.poll.records", Long.toString(Math.max(1, Math.min(maxRecords, Integer.MAX_VALUE))));
        // Calls that block (metadata, position) are bounded by the read's own time.
        p.put("default.api.timeout.ms", Long.toString(Math.max(timeoutMs, POSITION_FLOOR_MS)));
        p.put("request.timeout.ms", Long.toString(Math.max(timeoutMs, POSITION_FLOOR_MS)));
        // Bytes in, bytes out: the adapter decodes them itself.
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());

        // Never closed: the read has no group and commits nothing, so close() would only spend time (half
        // a second on a busy machine) that main's exit saves.
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        TopicPartition tp = new TopicPartition(topic, partition);
        consumer.assign(List.of(tp));
        consumer.seek(tp, start);
        long delivered = 0;
        // The client's own position after the seek (no fetch yet): a read asked to stop at or before it
        // polls not at all.
        long position = consumer.position(tp, Duration.ofMillis(POSITION_FLOOR_MS));
        while (true) {
            long remainingMs = (deadline - System.nanoTime()) / 1_000_000L;
            if (position >= stop || delivered >= maxRecords || remainingMs <= 0) {
                break;
            }
            ConsumerRecords<byte[], byte[]> records =
                    consumer.poll(Duration.ofMillis(Math.min(POLL_SLICE_MS, remainingMs)));
            // One partition is assigned: every record poll() handed over is printed, in its order.
            for (ConsumerRecord<byte[], byte[]> r : records) {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("offset", r.offset());
                out.put("value", r.value() == null ? null : utf8(r.value(), "value", r.offset()));
                if (r.key() != null) {
                    out.put("key", utf8(r.key(), "key", r.offset()));
                }
                emit(out);
                delivered++;
            }
            remainingMs = (deadline - System.nanoTime()) / 1_000_000L;
            position = consumer.position(tp, Duration.ofMillis(Math.max(remainingMs, POSITION_FLOOR_MS)));
        }
        emit(obj("position", position));
        return 0;
    }

    static String string(Map<String, Object> req, String key) throws Failure {
        if (!(req.get(key) instanceof String s)) {
            throw new Failure("bad request: " + key + " is missing or not a string");
        }
        return s;
    }

    static long number(Map<String, Object> req, String key) throws Failure {
        if (!(req.get(key) instanceof Long n) || n < 0) {
            throw new Failure("bad request: " + key + " is missing or not a non-negative integer");
        }
        return n;
    }

    /** A key or value as the contract's UTF-8 string; bytes that are not UTF-8 fail the read, naming the
     *  offset, rather than print a changed value. */
    static String utf8(byte[] bytes, String what, long offset) throws Failure {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes))
                    .toString();
        } catch (CharacterCodingException e) {
            throw new Failure("the " + what + " at offset " + offset + " is not UTF-8: " + e);
        }
    }

    static String oneLine(String s) {
        return String.join(" ", s.trim().split("\\s+"));
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static void emit(Map<String, Object> line) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, Object> e : line.entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            b.append(Json.quote(e.getKey())).append(':');
            Object v = e.getValue();
            b.append(v == null ? "null" : v instanceof String s ? Json.quote(s) : v.toString());
        }
        OUT.print(b.append("}\n"));
        OUT.flush();
    }

    /** Just enough JSON for the request: one object of strings, integers, booleans and nulls. */
    static final class Json {
        final String s;
        int i;

        Json(String s) {
            this.s = s;
        }

        Map<String, Object> object() {
            ws();
            expect('{');
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (peek() == '}') {
                i++;
            } else {
                while (true) {
                    ws();
                    String k = str();
                    ws();
                    expect(':');
                    ws();
                    m.put(k, value());
                    ws();
                    char c = next();
                    if (c == '}') {
                        break;
                    }
                    if (c != ',') {
                        throw new IllegalArgumentException("expected , or } at " + (i - 1));
                    }
                }
            }
            ws();
            if (i != s.length()) {
                throw new IllegalArgumentException("text after the object at " + i);
            }
            return m;
        }

        Object value() {
            char c = peek();
            if (c == '"') {
                return str();
            }
            for (String word : new String[] {"null", "true", "false"}) {
                if (s.startsWith(word, i)) {
                    i += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            int from = i;
            if (c == '-') {
                i++;
            }
            while (i < s.length() && Character.isDigit(s.charAt(i))) {
                i++;
            }
            if (i < s.length() && ".eE".indexOf(s.charAt(i)) >= 0) {
                throw new IllegalArgumentException("a number that is not an integer at " + from);
            }
            try {
                return Long.parseLong(s.substring(from, i));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("not a JSON value at " + from + " (only strings, integers, "
                        + "booleans and null are expected)");
            }
        }

        String str() {
            expect('"');
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = next();
                if (c == '"') {
                    return b.toString();
                }
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = next();
                switch (e) {
                    case '"', '\\', '/' -> b.append(e);
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        if (i + 4 > s.length()) {
                            throw new IllegalArgumentException("a short \\u escape at " + i);
                        }
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> throw new IllegalArgumentException("a bad escape at " + (i - 1));
                }
            }
        }

        void ws() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) {
                i++;
            }
        }

        char peek() {
            if (i >= s.length()) {
                throw new IllegalArgumentException("the line ends inside the object");
            }
            return s.charAt(i);
        }

        char next() {
            char c = peek();
            i++;
            return c;
        }

        void expect(char c) {
            if (next() != c) {
                throw new IllegalArgumentException("expected " + c + " at " + (i - 1));
            }
        }

        static String quote(String v) {
            StringBuilder b = new StringBuilder("\"");
            for (int k = 0; k < v.length(); k++) {
                char c = v.charAt(k);
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                    }
                }
            }
            return b.append('"').toString();
        }
    }
}
