// The differential's client: plays the scripts of tests/differential/scripts.txt through Kafka's Java
// client against one cluster and prints everything the client observed, one line per step, so that the
// same scripts against real Kafka and against `txnsim serve` can be compared line for line.
//
// usage: java -cp <kafka-clients 4.3.1 classpath> Differential.java HOST:PORT PREFIX SCRIPTS_FILE [WORKERS]
//
// WORKERS threads (default 1), each with its own clients, play the scripts in turn; the output is in the
// file's order whatever the workers' timing.
// Topics and transactional ids get PREFIX-<script>- in front (each run, each script its own), which the
// printed lines leave out. Every call is bounded (10 s), so a broken broker fails a step, never hangs it.
//
// Script steps (one per line, `#` starts a comment, `## name` starts a script):
//   topic T N                  create topic T with N partitions (the cluster's default replication factor)
//   producer P ID [K=V ...]    a transactional producer P with transactional id ID (config overrides after)
//   idempotent P [K=V ...]     an idempotent producer P, no transactional id
//   plain P [K=V ...]          a producer P without idempotence (no producer id)
//   init P | begin P | flush P | commit P | abort P | close P
//   send P T PART VALUE        a send, printed with its outcome by the next flush, commit, abort or close of P
//   offsets P GROUP T PART OFF send the consumer offset OFF of T/PART for GROUP to P's transaction
//   read LEVEL T PART FROM     rc or ru: poll from FROM until the position reaches the end offset at LEVEL
//   end T PART                 the earliest offset and the end offsets at both levels (ListOffsets)
//   committed GROUP T PART     GROUP's committed offset of T/PART as a read_committed consumer fetches it
//   sleep MS                   wait (a transaction left open past its timeout)
//   kill-leader T PART         the test kills T/PART's leader (kill -9 on real Kafka, `crash` on serve)
//   restart-killed             the test restarts the node it killed
//
// A fault step prints `FAULT <step> <topic on the cluster> <partition>` on stdout and waits for a line on
// stdin: the test does the fault and answers. Fault scripts run with one worker.
//
// Run as a single source file (JEP 330): nothing is compiled into the tree.

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.StringJoiner;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;

public class Differential {
    // Generous: on a loaded 2-core gate serve has stalled for over 10 s (docs/real-kafka.md), and a call that
    // times out on one system only is a difference that says nothing about either.
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(30);

    final String bootstrap;
    final String prefix;
    final Admin admin;
    final Map<String, KafkaConsumer<String, String>> readers = new LinkedHashMap<>();
    final Map<String, KafkaProducer<String, String>> producers = new LinkedHashMap<>();
    final Map<String, List<String[]>> pending = new LinkedHashMap<>();
    final Map<String, List<Future<RecordMetadata>>> futures = new LinkedHashMap<>();
    /** The partitions each producer's sends reached in its current transaction (reported by a flush). */
    final Map<String, Set<TopicPartition>> sentSinceBegin = new LinkedHashMap<>();
    String script = "";


    Differential(String bootstrap, String prefix) {
        this.bootstrap = bootstrap;
        this.prefix = prefix;
        this.admin = Admin.create(config());
        for (String level : List.of("rc", "ru")) {
            Properties p = config();
            p.put("isolation.level", level.equals("rc") ? "read_committed" : "read_uncommitted");
            p.put("auto.offset.reset", "none");
            // A fetch at the end waits this long on its connection, and a ListOffsets queues behind it.
            p.put("fetch.max.wait.ms", "20");
            p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
            p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
            readers.put(level, new KafkaConsumer<>(p));
        }
    }

    Properties config() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "30000");
        p.put("max.block.ms", "30000");
        return p;
    }

    /** The name on the cluster: each script's topics, ids and groups are its own. */
    String name(String n) {
        return prefix + "-" + script + "-" + n;
    }

    static String error(Throwable e) {
        while ((e instanceof ExecutionException || e.getClass().getSimpleName().equals("KafkaException"))
                && e.getCause() != null) {
            e = e.getCause();
        }
        return e.getClass().getSimpleName();
    }

    /** Each send of P since the last report, with its offset or error, then `what` ran and its outcome. */
    void report(String p, String what, Runnable step) {
        String outcome;
        try {
            step.run();
            outcome = "ok";
        } catch (RuntimeException e) {
            outcome = error(e);
        }
        List<String[]> sends = pending.getOrDefault(p, new ArrayList<>());
        List<Future<RecordMetadata>> fs = futures.getOrDefault(p, new ArrayList<>());
        for (int i = 0; i < sends.size(); i++) {
            String[] s = sends.get(i);
            String result;
            try {
                RecordMetadata m = fs.get(i).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                sentSinceBegin.computeIfAbsent(p, k -> new java.util.HashSet<>()).add(new TopicPartition(m.topic(), m.partition()));
                result = "offset " + m.offset();
            } catch (Exception e) {
                result = error(e);
            }
            print("  send " + p + " " + s[0] + "/" + s[1] + " " + s[2] + ": " + result);
        }
        sends.clear();
        fs.clear();
        print(what + " " + p + ": " + outcome);
    }

    /**
     * Commit, abort or close, then wait until its markers are in the logs. Kafka answers EndTxn once the Prepare
     * record is durable and writes the markers after (`TransactionCoordinator.endTransaction`), so a read
     * right after the call would race them; `txnsim serve` has written them by then. The steps run one at a
     * time, so once the producer's records are flushed each marker is the next entry of its partition: the
     * wait is for each partition the transaction wrote to grow by one.
     */
    void end(String p, String what, Runnable step) {
        // A commit sends what lingers first; an abort fails it unsent (`abortUndrainedBatches`).
        if (what.equals("commit")) {
            try {
                producers.get(p).flush();
            } catch (RuntimeException e) {
                // The commit meets the same error and reports it.
            }
            appended();
        }
        Set<TopicPartition> written = new java.util.HashSet<>();
        for (Future<RecordMetadata> f : futures.get(p)) {
            if (f.isDone()) {
                try {
                    RecordMetadata m = f.get();
                    written.add(new TopicPartition(m.topic(), m.partition()));
                } catch (Exception e) {
                    // A failed send wrote nothing.
                }
            }
        }
        written.addAll(sentSinceBegin.getOrDefault(p, Set.of()));
        Map<TopicPartition, Long> before = written.isEmpty() ? Map.of() : readers.get("ru").endOffsets(written);
        boolean[] ok = {false};
        report(p, what, () -> {
            step.run();
            ok[0] = true;
        });
        sentSinceBegin.remove(p);
        if (!ok[0] || written.isEmpty()) {
            return;
        }
        long deadline = System.currentTimeMillis() + CALL_TIMEOUT.toMillis();
        Map<TopicPartition, Long> now = before;
        while (System.currentTimeMillis() < deadline) {
            now = readers.get("ru").endOffsets(written);
            Map<TopicPartition, Long> seen = now;
            if (written.stream().allMatch(tp -> seen.get(tp) > before.get(tp))) {
                return;
            }
            sleep(20);
        }
        print("  " + what + " " + p + ": markers not written in 10 s (end offsets " + before + " then " + now + ")");
    }

    /**
     * Called after a commit's flush, before its EndTxn: the batches sent so far are in the logs and the
     * markers are not. Nothing here; scripts/ConformLayouts.java restores a rolled partition's segment size
     * there, so that the flushed batch alone starts the new segment.
     */
    void appended() {}

    static final java.io.BufferedReader STDIN =
            new java.io.BufferedReader(new java.io.InputStreamReader(System.in));

    /** Asks the test for a fault and waits for its answer. */
    static synchronized String fault(String what) throws java.io.IOException {
        System.out.println("FAULT " + what);
        System.out.flush();
        String answer = STDIN.readLine();
        return answer == null ? "no answer" : answer;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    void step(String[] w) throws Exception {
        switch (w[0]) {
            case "topic" -> {
                NewTopic t = new NewTopic(name(w[1]), Integer.parseInt(w[2]), (short) -1);
                admin.createTopics(List.of(t)).all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                print("topic " + w[1] + ": created");
            }
            case "producer", "idempotent", "plain" -> {
                Properties p = config();
                if (producers.containsKey(w[1])) {
                    producers.get(w[1]).close(Duration.ZERO); // a new instance under the same name
                }
                if (w[0].equals("producer")) {
                    p.put("transactional.id", name(w[2]));
                } else {
                    p.put("enable.idempotence", w[0].equals("idempotent") ? "true" : "false");
                }
                // Every send before a flush, commit or abort goes out in one batch per partition then, so
                // batch boundaries are the script's, not the client's timing.
                p.put("linger.ms", "1000");
                // A send refused outside a transaction stays queued until its delivery timeout (120 s by
                // default); the least Kafka allows here is linger.ms + request.timeout.ms.
                p.put("delivery.timeout.ms", "11000");
                p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
                for (int i = w[0].equals("producer") ? 3 : 2; i < w.length; i++) {
                    String[] kv = w[i].split("=", 2);
                    p.put(kv[0], kv[1]);
                }
                producers.put(w[1], new KafkaProducer<>(p));
                pending.put(w[1], new ArrayList<>());
                futures.put(w[1], new ArrayList<>());
            }
            case "init" -> report(w[1], "init", () -> producers.get(w[1]).initTransactions());
            case "begin" -> {
                sentSinceBegin.remove(w[1]);
                report(w[1], "begin", () -> producers.get(w[1]).beginTransaction());
            }
            case "flush" -> report(w[1], "flush", () -> producers.get(w[1]).flush());
            case "commit" -> end(w[1], "commit", () -> producers.get(w[1]).commitTransaction());
            case "abort" -> end(w[1], "abort", () -> producers.get(w[1]).abortTransaction());
            // Closing with a transaction open aborts it ("Aborting incomplete transaction due to shutdown",
            // Sender.run), and its ABORT markers follow as a commit's do: wait for them the same way, or
            // the next producer's send races them on Kafka (seen in a gate run) but not on serve.
            case "close" -> end(w[1], "close", () -> producers.get(w[1]).close(CALL_TIMEOUT));
            case "send" -> {
                pending.get(w[1]).add(new String[] {w[2], w[3], w[4]});
                try {
                    ProducerRecord<String, String> r =
                            new ProducerRecord<>(name(w[2]), Integer.parseInt(w[3]), null, w[4]);
                    futures.get(w[1]).add(producers.get(w[1]).send(r));
                } catch (RuntimeException e) {
                    futures.get(w[1]).add(java.util.concurrent.CompletableFuture.failedFuture(e));
                }
            }
            case "offsets" -> {
                TopicPartition tp = new TopicPartition(name(w[3]), Integer.parseInt(w[4]));
                Map<TopicPartition, OffsetAndMetadata> o = Map.of(tp, new OffsetAndMetadata(Long.parseLong(w[5])));
                ConsumerGroupMetadata group = new ConsumerGroupMetadata(name(w[2]));
                report(w[1], "offsets " + w[2] + " " + w[3] + "/" + w[4] + "@" + w[5],
                        () -> producers.get(w[1]).sendOffsetsToTransaction(o, group));
            }
            case "read" -> read(w[1], w[2], Integer.parseInt(w[3]), Long.parseLong(w[4]));
            case "end" -> {
                TopicPartition tp = new TopicPartition(name(w[1]), Integer.parseInt(w[2]));
                long earliest = readers.get("ru").beginningOffsets(List.of(tp)).get(tp);
                long ru = readers.get("ru").endOffsets(List.of(tp)).get(tp);
                long rc = readers.get("rc").endOffsets(List.of(tp)).get(tp);
                print("end " + w[1] + "/" + w[2] + ": earliest " + earliest + ", ru " + ru + ", rc " + rc);
            }
            case "committed" -> {
                Properties p = config();
                p.put("group.id", name(w[1]));
                p.put("isolation.level", "read_committed");
                p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
                p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
                TopicPartition tp = new TopicPartition(name(w[2]), Integer.parseInt(w[3]));
                String outcome;
                try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                    // An offset of an open transaction is answered UNSTABLE_OFFSET_COMMIT, which the consumer
                    // retries until the call's time is up (ten seconds: a gate's busy machine once took more
                    // than five to answer a settled one on serve).
                    OffsetAndMetadata o = c.committed(Set.of(tp), CALL_TIMEOUT).get(tp);
                    outcome = o == null ? "none" : Long.toString(o.offset());
                } catch (RuntimeException e) {
                    outcome = error(e);
                }
                print("committed " + w[1] + " " + w[2] + "/" + w[3] + ": " + outcome);
            }
            case "sleep" -> sleep(Long.parseLong(w[1]));
            case "kill-leader", "restart-killed" -> {
                String target = w.length > 2 ? " " + name(w[1]) + " " + w[2] : "";
                print(w[0] + ": " + fault(w[0] + target));
            }
            default -> throw new IllegalArgumentException("unknown step: " + String.join(" ", w));
        }
    }

    /** Polls T/PART at LEVEL from FROM until the position reaches the level's end offset. */
    void read(String level, String topic, int partition, long from) {
        KafkaConsumer<String, String> c = readers.get(level);
        TopicPartition tp = new TopicPartition(name(topic), partition);
        StringJoiner seen = new StringJoiner(" ");
        String outcome;
        try {
            List<ConsumerRecord<String, String>> records = new ArrayList<>();
            outcome = drain(c, tp, from, c.endOffsets(List.of(tp)).get(tp), records);
            records.forEach(r -> seen.add(r.offset() + ":" + r.value()));
        } catch (RuntimeException e) {
            outcome = error(e);
        }
        print("read " + level + " " + topic + "/" + partition + " from " + from + ": [" + seen + "] " + outcome);
    }

    /**
     * Polls tp on c from FROM until its position reaches END (or the call's time is up), adding each record
     * the client hands over to `into`; says where the position ended.
     */
    static String drain(KafkaConsumer<String, String> c, TopicPartition tp, long from, long end,
            List<ConsumerRecord<String, String>> into) {
        c.assign(List.of(tp));
        c.seek(tp, from);
        long deadline = System.currentTimeMillis() + CALL_TIMEOUT.toMillis();
        while (c.position(tp) < end && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                into.add(r);
            }
        }
        return c.position(tp) < end ? "stuck at " + c.position(tp) + " below " + end : "position " + c.position(tp);
    }

    void close() {
        producers.values().forEach(p -> p.close(Duration.ZERO));
        producers.clear();
        pending.clear();
        futures.clear();
        sentSinceBegin.clear();
    }

    /** One script's printed lines; a worker plays one script at a time. */
    StringBuilder out = new StringBuilder();

    void print(String line) {
        out.append(line).append('\n');
    }

    /** Plays one script: its output, and whether every step ran (a failed step is a broken harness). */
    boolean play(String name, List<String> lines) {
        script = name;
        out = new StringBuilder();
        boolean ok = true;
        for (String line : lines) {
            try {
                step(line.split("\\s+"));
            } catch (Exception e) {
                print("step failed: " + line + ": " + error(e));
                ok = false;
            }
        }
        close();
        return ok;
    }

    public static void main(String[] args) throws Exception {
        // The scripts in order, each with its steps (comments and blank lines dropped).
        Map<String, List<String>> scripts = new LinkedHashMap<>();
        List<String> current = null;
        for (String raw : Files.readAllLines(Path.of(args[2]))) {
            if (raw.startsWith("## ")) {
                current = new ArrayList<>();
                scripts.put(raw.substring(3).trim(), current);
                continue;
            }
            String line = raw.replaceAll("#.*", "").trim();
            if (!line.isEmpty()) {
                current.add(line);
            }
        }
        // Workers each with their own clients take scripts in turn: the steps wait on the network.
        int workers = args.length > 3 ? Integer.parseInt(args[3]) : 1;
        List<String> names = new ArrayList<>(scripts.keySet());
        Map<String, String> outputs = new java.util.concurrent.ConcurrentHashMap<>();
        java.util.concurrent.atomic.AtomicInteger next = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicBoolean ok = new java.util.concurrent.atomic.AtomicBoolean(true);
        List<Thread> threads = new ArrayList<>();
        for (int k = 0; k < workers; k++) {
            Thread t = new Thread(() -> {
                Differential d = new Differential(args[0], args[1]);
                for (int i = next.getAndIncrement(); i < names.size(); i = next.getAndIncrement()) {
                    String name = names.get(i);
                    if (!d.play(name, scripts.get(name))) {
                        ok.set(false);
                    }
                    outputs.put(name, d.out.toString());
                }
                d.readers.values().forEach(KafkaConsumer::close);
                d.admin.close();
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        for (String name : names) {
            System.out.print("== " + name + "\n" + outputs.getOrDefault(name, "step failed: the worker died\n"));
        }
        System.exit(ok.get() ? 0 : 1);
    }
}
