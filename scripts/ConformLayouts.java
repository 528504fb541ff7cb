// The Java player of `txnsim conform`'s layout script (conform/layouts.txt): builds each layout on one
// cluster through Kafka's Java client 4.3.1 and prints, for each `read`, what the log holds there, so that
// the layouts built on a real Kafka 4.3.1 cluster can be held against the ones `txnsim serve` builds with
// the engine's own producers and coordinator, and the client adapters can read both.
//
// usage: java -cp <classes>:<kafka-clients 4.3.1 classpath> ConformLayouts [--prefix P] [--pause] HOST:PORT LAYOUTS [NAME ...]
//   (conform/adapters/java-4.3.1/layouts compiles it with scripts/Differential.java and runs it so)
//
// The layouts run one after another (NAMEs: only those, in the file's order), each on topics
// P-<layout>-<topic> (P is `conform` unless --prefix says otherwise) and with transactional ids
// P-<layout>-<producer>. It extends scripts/Differential.java, whose steps it shares: the layout syntax is
// translated into Differential's (`producer P` is its `producer P P`, `plain P` its `idempotent P
// acks=all`), and `topic`, `roll`, `delete-records`, `read` and transaction.version=1 are this file's.
// A producer's K=V other than transaction.version go to KafkaProducer as they are (compression.type, or
// any other producer config); its transaction.timeout.ms is 15 minutes unless it says otherwise, so that
// a transaction a layout leaves open is still open when the adapters read it.
//
// Layouts run with the cluster to themselves: `transaction.version=1` lowers the cluster-wide feature for
// a moment, and any other client's producer that connects then takes TV1 too.
//
// With --pause the player stops after printing each read's line until a line comes on stdin (or stdin
// ends; at most 10 minutes), so that the caller reads the partition with other clients while it holds
// exactly what the read saw: a later step (delete-records, a commit, a timeout) may change it.
//
// stdout: one JSON object per line as it happens, nothing else (what each step did goes to stderr):
//   {"layout":L,"what":TEXT,"prefix":"P-L-"}                           a layout starts
//   {"layout":L,"roll":"T/N","base_offset":B}                          the roll took effect: B starts a segment
//   {"layout":L,"read":"T/N","from":F,"topic":"P-L-T","partition":N,
//    "log_start":S,"high_watermark":H,"last_stable_offset":O,
//    "read_uncommitted":{"records":[{"offset":..,"value":..}],"position":P},
//    "read_committed":{"records":[...],"position":P}}                  a read: ListOffsets at both levels,
//                                                                      and what the client delivered from F
//   {"layout":L,"error":TEXT}                                          a step failed: the layout is not as written
// Exit 0 when every step of every layout ran as written, 1 otherwise, 2 on a bad command line or file.
//
// Two steps need more of the cluster than a client has, each from Kafka 4.3.1 itself:
//
// `roll T N`: Kafka 4.x refuses `segment.bytes` below 1 MiB (LogConfig: atLeast(1024 * 1024)), and its
// internal `internal.segment.bytes` (LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG, no lower bound) cannot do it
// either: UnifiedLog.append refuses a batch larger than the segment size (RecordBatchTooLargeException), so
// a size that makes every next batch roll refuses the batch, the coordinator's markers included. The roll
// is by time instead: UnifiedLog.maybeRoll rolls before an append when LogSegment.shouldRoll finds the
// active segment non-empty and the batch's max timestamp more than `segment.ms` (at least 1) after the
// segment's first batch's (timeWaitedForRoll; `segment.jitter.ms` is 0). With `segment.ms` at 1 and the
// step waiting a few milliseconds once the leader holds it, the next batch appended (a producer's batch
// sent after the roll step, or the coordinator's marker) starts a new segment; once it is in, the config
// is removed again. A topic config reaches the leader through the metadata log a moment after
// IncrementalAlterConfigs answers, so each change is waited for on the leader itself, by a probe that the
// leader refuses either way and whose error says which config it holds: every layout topic is created
// with `message.timestamp.before.max.ms` of a day, and the roll sets `max.message.bytes` with `segment.ms`
// in the same request (one metadata batch, one LogConfig on the broker). A probe record of 512 KiB
// stamped 1970 is refused INVALID_TIMESTAMP (LogValidator) under the usual config and RECORD_TOO_LARGE
// under the roll's (UnifiedLog.analyzeAndValidateRecords checks the size first), and neither appends
// anything. A batch whose records were sent before the roll step carries their older timestamps and may
// not roll: in a layout, `roll` comes before the `send`s of the batch it is for, and a roll with a send
// to its partition not yet flushed is an error.
//
// `producer P transaction.version=1`: the 4.3.1 producer takes its transaction version from the finalized
// `transaction.version` feature the brokers report in ApiVersions (TransactionManager
// .maybeUpdateTransactionV2Enabled, at initTransactions and after each EndTxn is built), so P's
// initTransactions runs with the feature downgraded to 1 (Admin.updateFeatures, SAFE_DOWNGRADE, which
// FeatureControlManager allows for transaction.version), and it is upgraded back to 2 at once. The client
// would switch to the newer level when a connection it opens later reports it; the player keeps each
// producer at the version it chose at init (TransactionManager.latestFinalizedFeaturesEpoch set past any
// epoch), as a producer that opens no new connection does, and checks after every step that each producer
// is still at its version. A TV1 transaction's markers carry the producer's epoch, a TV2 one's the epoch
// bumped by EndTxn (KIP-890).

import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidTimestampException;
import org.apache.kafka.common.errors.RecordTooLargeException;

public class ConformLayouts extends Differential {
    static final String TV = "transaction.version";
    /** Every layout topic refuses records stamped more than a day before the broker's clock. */
    static final String BEFORE_MAX_MS = "86400000";
    /** The roll's `max.message.bytes`: far above any layout batch, far below the probe. */
    static final String ROLL_MAX_MESSAGE_BYTES = "131072";
    static final int PROBE_BYTES = 512 * 1024;

    /** Each producer's transaction version (1 or 2), from its `producer` line. */
    final Map<String, Integer> versions = new HashMap<>();
    /** Each producer's `producer` step in Differential's syntax, to make it again. */
    final Map<String, String[]> made = new HashMap<>();
    /** Producers that ran initTransactions: their version is pinned and checked. */
    final List<String> initialized = new ArrayList<>();
    KafkaProducer<byte[], byte[]> probe;
    /** Whether each read waits for a line on stdin after its own line. */
    boolean pause;
    boolean failed;

    ConformLayouts(String bootstrap, String prefix) {
        super(bootstrap, prefix);
    }

    @Override
    void print(String line) {
        // Differential's lines are the layout's trace; each says how its step ended, and a step that did not
        // end as written is the layout's error.
        System.err.println("[" + script + "] " + line);
        String l = line.trim();
        boolean fine = l.endsWith(": ok") || l.endsWith(": created") || l.matches(".*: offset \\d+")
                || l.startsWith("read ") || l.startsWith("end ");
        if (!fine) {
            error(l);
        }
    }

    void error(String what) {
        failed = true;
        emit(obj("error", what));
    }

    void emit(Map<String, Object> fields) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("layout", script);
        m.putAll(fields);
        System.out.println(json(m));
        System.out.flush();
    }

    @Override
    void step(String[] w) {
        try {
            layoutStep(w);
        } catch (Exception e) {
            error("step failed: " + String.join(" ", w) + ": " + error(e) + ": " + oneLine(String.valueOf(e.getMessage())));
        }
        appended();
        for (String p : initialized) {
            int want = versions.get(p);
            int has = transactionV2(producers.get(p)) ? 2 : 1;
            if (has != want) {
                error("producer " + p + " is at transaction.version " + has + ", not " + want + " (after: "
                        + String.join(" ", w) + ")");
            }
        }
    }

    static String oneLine(String s) {
        return String.join(" ", s.trim().split("\\s+"));
    }

    void layoutStep(String[] w) throws Exception {
        switch (w[0]) {
            case "topic" -> {
                NewTopic t = new NewTopic(name(w[1]), Integer.parseInt(w[2]), (short) -1);
                Map<String, String> configs = new LinkedHashMap<>();
                configs.put("message.timestamp.before.max.ms", BEFORE_MAX_MS);
                for (int i = 3; i < w.length; i++) {
                    String[] kv = w[i].split("=", 2);
                    configs.put(kv[0], kv[1]);
                }
                admin.createTopics(List.of(t.configs(configs))).all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                print("topic " + w[1] + ": created");
            }
            case "producer" -> {
                // A layout may leave a transaction open for the adapters' reads that follow the build: the
                // coordinator aborts it after transaction.timeout.ms (60 s by default), so the player's producers
                // take the most the broker allows by default (transaction.max.timeout.ms, 15 minutes).
                List<String> d = new ArrayList<>(List.of("producer", w[1], w[1], "transaction.timeout.ms=900000"));
                int version = 2;
                for (int i = 2; i < w.length; i++) {
                    if (w[i].startsWith(TV + "=")) {
                        version = Integer.parseInt(w[i].substring(TV.length() + 1));
                        if (version != 1 && version != 2) {
                            throw new IllegalArgumentException("transaction.version is 1 or 2: " + w[i]);
                        }
                    } else {
                        d.add(w[i]);
                    }
                }
                versions.put(w[1], version);
                made.put(w[1], d.toArray(new String[0]));
                initialized.remove(w[1]);
                super.step(made.get(w[1]));
            }
            case "plain" -> {
                List<String> d = new ArrayList<>(List.of("idempotent", w[1], "acks=all"));
                d.addAll(Arrays.asList(w).subList(2, w.length));
                super.step(d.toArray(new String[0]));
            }
            case "init" -> init(w[1]);
            case "roll" -> roll(new TopicPartition(name(w[1]), Integer.parseInt(w[2])));
            case "delete-records" -> {
                TopicPartition tp = new TopicPartition(name(w[1]), Integer.parseInt(w[2]));
                long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(Long.parseLong(w[3]))))
                        .lowWatermarks().get(tp).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).lowWatermark();
                print("delete-records " + w[1] + "/" + w[2] + " before " + w[3] + ": low watermark " + low + ": ok");
            }
            case "read" -> read(w[1], Integer.parseInt(w[2]), Long.parseLong(w[3]));
            case "idempotent", "offsets", "end", "committed", "sleep", "kill-leader", "restart-killed", "close" ->
                throw new IllegalArgumentException("not a layout step: " + String.join(" ", w));
            default -> super.step(w);
        }
    }

    /**
     * initTransactions at the producer's version: for version 1 with the cluster's `transaction.version`
     * downgraded around it. The producer learns the feature from the ApiVersions of the brokers it talks
     * to; one that met a broker which had not yet applied the change is made again (bounded).
     */
    void init(String p) throws Exception {
        int want = versions.get(p);
        if (want == 1) {
            setTransactionVersion((short) 1);
        }
        try {
            long deadline = System.currentTimeMillis() + CALL_TIMEOUT.toMillis();
            while (true) {
                report(p, "init", () -> producers.get(p).initTransactions());
                boolean v2 = transactionV2(producers.get(p));
                if ((v2 ? 2 : 1) == want) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("producer " + p + " still chose transaction.version "
                            + (v2 ? 2 : 1) + " after " + CALL_TIMEOUT.toSeconds() + " s of tries");
                }
                System.err.println("[" + script + "] init " + p + ": the client chose transaction.version "
                        + (v2 ? 2 : 1) + " from a broker that had not applied the feature yet; making it again");
                sleep(200);
                super.step(made.get(p));
            }
        } finally {
            if (want == 1) {
                setTransactionVersion((short) 2);
            }
        }
        pinTransactionVersion(producers.get(p));
        initialized.add(p);
    }

    /** The cluster's finalized transaction.version set to `level`, waited for until a broker reports it. */
    void setTransactionVersion(short level) throws Exception {
        short now = finalizedTransactionVersion();
        if (now != level) {
            FeatureUpdate.UpgradeType type =
                    level < now ? FeatureUpdate.UpgradeType.SAFE_DOWNGRADE : FeatureUpdate.UpgradeType.UPGRADE;
            admin.updateFeatures(Map.of(TV, new FeatureUpdate(level, type)), new UpdateFeaturesOptions())
                    .all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
        long deadline = System.currentTimeMillis() + CALL_TIMEOUT.toMillis();
        while ((now = finalizedTransactionVersion()) != level) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("transaction.version still " + now + ", not " + level);
            }
            sleep(50);
        }
        System.err.println("[" + script + "] transaction.version finalized at " + level);
    }

    short finalizedTransactionVersion() throws Exception {
        FinalizedVersionRange r = admin.describeFeatures().featureMetadata()
                .get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS).finalizedFeatures().get(TV);
        return r == null ? 0 : r.maxVersionLevel();
    }

    static Object transactionManager(KafkaProducer<?, ?> p) throws ReflectiveOperationException {
        Field f = KafkaProducer.class.getDeclaredField("transactionManager");
        f.setAccessible(true);
        return f.get(p);
    }

    /** TransactionManager.isTransactionV2Enabled(): the version the producer's next transaction uses. */
    static boolean transactionV2(KafkaProducer<?, ?> p) {
        try {
            Object tm = transactionManager(p);
            return (boolean) tm.getClass().getMethod("isTransactionV2Enabled").invoke(tm);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("kafka-clients has no TransactionManager.isTransactionV2Enabled: " + e);
        }
    }

    /** The producer keeps its transaction version: no later ApiVersions answer is newer than the one it has. */
    static void pinTransactionVersion(KafkaProducer<?, ?> p) throws ReflectiveOperationException {
        Object tm = transactionManager(p);
        Field f = tm.getClass().getDeclaredField("latestFinalizedFeaturesEpoch");
        f.setAccessible(true);
        f.setLong(tm, Long.MAX_VALUE);
    }

    /**
     * `roll`: the roll's config set, and waited for on the leader. `segment.ms` is a topic config, so a
     * roll holds for every partition of the topic until the rolled one's next batch is in: another
     * partition's batch in that time starts a segment too, and is reported as an error.
     */
    void roll(TopicPartition tp) throws Exception {
        // A record carries the time of its send: one sent before the roll step may be too old to roll.
        for (Map.Entry<String, List<String[]>> e : pending.entrySet()) {
            for (String[] send : e.getValue()) {
                if (name(send[0]).equals(tp.topic()) && Integer.parseInt(send[1]) == tp.partition()) {
                    throw new IllegalStateException(e.getKey() + "'s send of " + send[2] + " to " + send[0] + "/"
                            + send[1] + " is not flushed: flush it before the roll, or send it after");
                }
            }
        }
        RollWindow w = windows.get(tp.topic());
        if (w == null) {
            w = new RollWindow();
            for (org.apache.kafka.common.PartitionInfo p : readers.get("ru").partitionsFor(tp.topic())) {
                w.ends.put(new TopicPartition(tp.topic(), p.partition()), 0L);
            }
            w.ends.putAll(readers.get("ru").endOffsets(w.ends.keySet()));
            alter(tp.topic(), List.of(
                    new AlterConfigOp(new ConfigEntry("segment.ms", "1"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", ROLL_MAX_MESSAGE_BYTES), AlterConfigOp.OpType.SET)));
            awaitLeader(tp, true);
            windows.put(tp.topic(), w);
        }
        long end = readers.get("ru").endOffsets(List.of(tp)).get(tp);
        w.pending.put(tp, end);
        // Every batch from here on is stamped at least 2 ms after the active segment's first one.
        sleep(5);
        print("roll " + tp + " at " + end + ": ok");
    }

    /** A topic under the roll's config: its partitions' end offsets when it began, the rolls waiting. */
    static final class RollWindow {
        final Map<TopicPartition, Long> ends = new LinkedHashMap<>();
        final Map<TopicPartition, Long> pending = new LinkedHashMap<>();
        final java.util.Set<TopicPartition> reported = new java.util.HashSet<>();
    }

    final Map<String, RollWindow> windows = new LinkedHashMap<>();

    /**
     * After a step (and after a commit's flush): once a rolled partition's next batch is in, the topic gets
     * its usual config back. A partition whose end moved while the roll's config held started a segment
     * there (unless it was empty); one that was not rolled is an error.
     */
    @Override
    void appended() {
        for (String topic : new ArrayList<>(windows.keySet())) {
            RollWindow w = windows.get(topic);
            try {
                Map<TopicPartition, Long> now = readers.get("ru").endOffsets(w.ends.keySet());
                for (Map.Entry<TopicPartition, Long> e : w.ends.entrySet()) {
                    TopicPartition q = e.getKey();
                    if (!w.pending.containsKey(q) && e.getValue() > 0 && now.get(q) > e.getValue() && w.reported.add(q)) {
                        error("roll: a batch appended to " + q + " while " + topic + " was under the roll's config "
                                + "started a segment at " + e.getValue() + " too (segment.ms is a topic config)");
                    }
                }
                boolean grew = w.pending.entrySet().stream().anyMatch(e -> now.get(e.getKey()) > e.getValue());
                if (!grew) {
                    continue;
                }
                windows.remove(topic);
                alter(topic, List.of(
                        new AlterConfigOp(new ConfigEntry("segment.ms", ""), AlterConfigOp.OpType.DELETE),
                        new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE)));
                awaitLeader(w.pending.keySet().iterator().next(), false);
                for (Map.Entry<TopicPartition, Long> e : w.pending.entrySet()) {
                    TopicPartition tp = e.getKey();
                    String shown = tp.topic().substring(name("").length()) + "/" + tp.partition();
                    if (now.get(tp) > e.getValue()) {
                        System.err.println("[" + script + "] roll " + tp + ": a segment starts at " + e.getValue()
                                + " (end offset now " + now.get(tp) + ")");
                        emit(obj("roll", shown, "base_offset", e.getValue()));
                    } else {
                        error("roll " + shown + ": its topic's roll ended with the batch of another partition, "
                                + "before this one's next batch (segment.ms is a topic config)");
                    }
                }
            } catch (Exception e) {
                windows.remove(topic);
                error("roll of " + topic + ": " + error(e) + ": " + e.getMessage());
            }
        }
    }

    void alter(String topic, Collection<AlterConfigOp> ops) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        admin.incrementalAlterConfigs(Map.of(r, ops)).all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** Probes tp's leader until it refuses the probe as under the roll's config (or as under the usual one). */
    void awaitLeader(TopicPartition tp, boolean rollConfig) throws Exception {
        if (probe == null) {
            Properties p = config();
            p.put("enable.idempotence", "false");
            p.put("acks", "1");
            p.put("retries", "0");
            p.put("linger.ms", "0");
            p.put("max.request.size", Integer.toString(2 * PROBE_BYTES));
            p.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            p.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
            probe = new KafkaProducer<>(p);
        }
        Class<?> want = rollConfig ? RecordTooLargeException.class : InvalidTimestampException.class;
        long deadline = System.currentTimeMillis() + CALL_TIMEOUT.toMillis();
        int probes = 0;
        while (true) {
            probes++;
            Throwable refusal;
            try {
                probe.send(new ProducerRecord<>(tp.topic(), tp.partition(), 0L, null, new byte[PROBE_BYTES]))
                        .get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                throw new IllegalStateException("the leader of " + tp + " appended the probe: the topic lacks "
                        + "message.timestamp.before.max.ms, so the layout now holds a record it did not write");
            } catch (ExecutionException e) {
                refusal = e.getCause();
            }
            if (want.isInstance(refusal)) {
                System.err.println("[" + script + "] " + tp + "'s leader holds the " + (rollConfig ? "roll's" : "usual")
                        + " config (" + probes + " probes)");
                return;
            }
            if (!(refusal instanceof RecordTooLargeException || refusal instanceof InvalidTimestampException)) {
                throw new IllegalStateException("the probe of " + tp + " failed otherwise: " + refusal);
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException(tp + "'s leader did not take the " + (rollConfig ? "roll's" : "usual")
                        + " config in " + CALL_TIMEOUT.toSeconds() + " s");
            }
            sleep(50);
        }
    }

    /** `read T N FROM`: ListOffsets at both levels, then the client's delivery from FROM at each. */
    void read(String topic, int partition, long from) {
        TopicPartition tp = new TopicPartition(name(topic), partition);
        Map<String, Object> m = obj("read", topic + "/" + partition, "from", from, "topic", tp.topic(), "partition", partition);
        long start = readers.get("ru").beginningOffsets(List.of(tp)).get(tp);
        long hw = readers.get("ru").endOffsets(List.of(tp)).get(tp);
        long lso = readers.get("rc").endOffsets(List.of(tp)).get(tp);
        m.put("log_start", start);
        m.put("high_watermark", hw);
        m.put("last_stable_offset", lso);
        for (String[] level : new String[][] {{"ru", "read_uncommitted"}, {"rc", "read_committed"}}) {
            List<ConsumerRecord<String, String>> records = new ArrayList<>();
            String outcome;
            try {
                outcome = drain(readers.get(level[0]), tp, from, level[0].equals("ru") ? hw : lso, records);
            } catch (RuntimeException e) {
                outcome = error(e);
            }
            List<Object> out = new ArrayList<>();
            for (ConsumerRecord<String, String> r : records) {
                Map<String, Object> one = obj("offset", r.offset(), "value", r.value());
                if (r.key() != null) {
                    one.put("key", r.key());
                }
                out.add(one);
            }
            Map<String, Object> at = obj("records", out);
            if (outcome.startsWith("position ")) {
                at.put("position", Long.parseLong(outcome.substring("position ".length())));
            } else {
                at.put("position", null);
                error("read " + level[1] + " " + topic + "/" + partition + " from " + from + ": " + outcome);
            }
            m.put(level[1], at);
        }
        emit(m);
        if (pause) {
            awaitCaller();
        }
    }

    /** --pause: waits for the caller's line on stdin (bounded; an ended stdin waits no more). */
    void awaitCaller() {
        java.util.concurrent.CompletableFuture<String> answer = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return STDIN.readLine();
            } catch (java.io.IOException e) {
                return null;
            }
        });
        try {
            answer.get(10, TimeUnit.MINUTES);
        } catch (Exception e) {
            error("--pause: no line on stdin in 10 minutes after the read");
        }
    }

    @Override
    void close() {
        super.close();
        if (probe != null) {
            probe.close(Duration.ZERO);
            probe = null;
        }
        versions.clear();
        made.clear();
        initialized.clear();
        for (RollWindow w : windows.values()) {
            for (TopicPartition tp : w.pending.keySet()) {
                error("roll " + tp.topic() + "/" + tp.partition() + ": no batch followed it in the layout");
            }
        }
        windows.clear();
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    @SuppressWarnings("unchecked")
    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Map<?, ?> m) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<String, Object> e : ((Map<String, Object>) m).entrySet()) {
                b.append(b.length() > 1 ? "," : "").append(json(e.getKey())).append(':').append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        if (v instanceof List<?> l) {
            StringBuilder b = new StringBuilder("[");
            for (Object o : l) {
                b.append(b.length() > 1 ? "," : "").append(json(o));
            }
            return b.append(']').toString();
        }
        if (v instanceof String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> b.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
                }
            }
            return b.append('"').toString();
        }
        return v.toString();
    }

    public static void main(String[] args) throws Exception {
        List<String> a = new ArrayList<>(List.of(args));
        String prefix = "conform";
        boolean pause = false;
        while (!a.isEmpty() && a.get(0).startsWith("--")) {
            if (a.get(0).equals("--prefix") && a.size() >= 2) {
                prefix = a.get(1);
                a = a.subList(2, a.size());
            } else if (a.get(0).equals("--pause")) {
                pause = true;
                a = a.subList(1, a.size());
            } else {
                break;
            }
        }
        if (a.size() < 2) {
            System.err.println("usage: ConformLayouts [--prefix P] [--pause] HOST:PORT LAYOUTS_FILE [NAME ...]");
            System.exit(2);
        }
        // The layouts in order, each with what it tests (its first comment line) and its steps.
        Map<String, List<String>> layouts = new LinkedHashMap<>();
        Map<String, String> what = new HashMap<>();
        List<String> current = null;
        for (String raw : Files.readAllLines(Path.of(a.get(1)))) {
            if (raw.startsWith("## ")) {
                String layout = raw.substring(3).trim();
                current = new ArrayList<>();
                layouts.put(layout, current);
                continue;
            }
            if (current != null && current.isEmpty() && raw.startsWith("# ")) {
                what.putIfAbsent(layoutOf(layouts), raw.substring(2).trim());
            }
            String line = raw.replaceAll("#.*", "").trim();
            if (line.isEmpty()) {
                continue;
            }
            if (current == null) {
                System.err.println("ConformLayouts: a step before the first `## NAME`: " + line);
                System.exit(2);
            }
            current.add(line);
        }
        List<String> names = a.size() > 2 ? a.subList(2, a.size()) : new ArrayList<>(layouts.keySet());
        for (String n : names) {
            if (!layouts.containsKey(n)) {
                System.err.println("ConformLayouts: no layout " + n + " in " + a.get(1));
                System.exit(2);
            }
        }
        ConformLayouts player = new ConformLayouts(a.get(0), prefix);
        player.pause = pause;
        boolean ok = true;
        for (String n : layouts.keySet()) {
            if (!names.contains(n)) {
                continue;
            }
            player.script = n;
            player.failed = false;
            player.emit(obj("what", what.getOrDefault(n, ""), "prefix", player.name("")));
            boolean ran = player.play(n, layouts.get(n));
            ok &= ran && !player.failed;
        }
        player.readers.values().forEach(c -> c.close(Duration.ZERO));
        player.admin.close(Duration.ZERO);
        System.exit(ok ? 0 : 1);
    }

    static String layoutOf(Map<String, List<String>> layouts) {
        String last = null;
        for (String k : layouts.keySet()) {
            last = k;
        }
        return last;
    }
}
