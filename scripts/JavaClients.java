// Kafka's own Java client (kafka-clients, the reference for every other client's transaction manager)
// against `txnsim serve`: the same experiments as seed_experiment.py, consume_transform_produce.py and
// broker_crash.py, printing the same lines, with the same bounds (every call and read ends within 10 s, so a broken broker fails the
// program, never hangs it).
//
// usage: java -cp kafka-clients.jar:slf4j-api.jar JavaClients.java seed HOST:PORT [REPLICATION_FACTOR [TOPIC]]
//        java -cp ... JavaClients.java ctp HOST:PORT
//        java -cp ... JavaClients.java crash HOST:PORT   (then `crashed` on stdin)
//
// Run as a single source file (JEP 330): nothing is compiled into the tree.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.StringJoiner;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

public class JavaClients {
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);
    static final long READ_TIMEOUT_MS = 10_000;
    // After the expected records arrived, keep polling this long so that extra records would show too.
    static final long SETTLE_MS = 500;

    static Properties config(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "10000");
        p.put("max.block.ms", "10000");
        return p;
    }

    /** A consumer of `topic` in `group` at `isolation`, from the earliest offset when the group has none. */
    static KafkaConsumer<String, String> consumer(String bootstrap, String group, String isolation, String topic) {
        return consumer(bootstrap, group, isolation, topic, new Properties());
    }

    static KafkaConsumer<String, String> consumer(
            String bootstrap, String group, String isolation, String topic, Properties extra) {
        Properties p = config(bootstrap);
        p.putAll(extra);
        p.put("group.id", group);
        p.put("isolation.level", isolation);
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        p.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        return producer(bootstrap, transactionalId, new Properties());
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId, Properties extra) {
        Properties p = config(bootstrap);
        p.putAll(extra);
        p.put("transactional.id", transactionalId);
        p.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        p.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        return new KafkaProducer<>(p);
    }

    /**
     * Values delivered until `want` arrived (then SETTLE_MS more), or READ_TIMEOUT_MS passed. Polling starts
     * with the group's assignment, so an empty answer means the consumer read and found nothing.
     */
    static List<String> poll(KafkaConsumer<String, String> c, int want) {
        List<String> seen = new ArrayList<>();
        long deadline = System.currentTimeMillis() + READ_TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline && c.assignment().isEmpty()) {
            take(c, seen);
        }
        long settleUntil = -1;
        while (System.currentTimeMillis() < deadline) {
            if (seen.size() >= want && settleUntil < 0) {
                settleUntil = System.currentTimeMillis() + SETTLE_MS;
            }
            if (settleUntil >= 0 && System.currentTimeMillis() >= settleUntil) {
                break;
            }
            take(c, seen);
        }
        return seen;
    }

    /** The next `n` records' values, or fewer if READ_TIMEOUT_MS passes first (one record per poll). */
    static List<String> take(KafkaConsumer<String, String> c, int n) {
        List<String> seen = new ArrayList<>();
        long deadline = System.currentTimeMillis() + READ_TIMEOUT_MS;
        while (seen.size() < n && System.currentTimeMillis() < deadline) {
            take(c, seen);
        }
        return seen;
    }

    static void take(KafkaConsumer<String, String> c, List<String> seen) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
            seen.add(r.value());
        }
    }

    /** A list as Python prints one, so that every client's lines compare equal. */
    static String list(List<String> values) {
        StringJoiner j = new StringJoiner(", ", "[", "]");
        for (String v : values) {
            j.add("'" + v + "'");
        }
        return j.toString();
    }

    static void createTopic(String bootstrap, String topic, int replicationFactor) throws Exception {
        try (Admin admin = Admin.create(config(bootstrap))) {
            NewTopic t = new NewTopic(topic, 1, (short) replicationFactor);
            admin.createTopics(List.of(t)).all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
    }

    /**
     * consume_transform_produce.py's steps and lines: a read_committed consumer in `ctp-group` (no
     * auto-commit) reads `ctp-in` two records at a time; for each pair a transactional producer writes the
     * upper-cased values to `ctp-out` and sends the consumer's next offset with its group metadata
     * (KIP-447: TxnOffsetCommit carries the generation and member id). The first transaction commits, the
     * second aborts.
     */
    static void ctp(String bootstrap) throws Exception {
        String in = "ctp-in", out = "ctp-out", group = "ctp-group";
        createTopic(bootstrap, in, 1);
        createTopic(bootstrap, out, 1);
        Properties plainConfig = config(bootstrap);
        plainConfig.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        plainConfig.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(plainConfig)) {
            for (String v : List.of("a", "b", "c", "d")) {
                plain.send(new ProducerRecord<>(in, v)).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
        Properties sourceConfig = new Properties();
        sourceConfig.put("enable.auto.commit", "false");
        sourceConfig.put("max.poll.records", "1");
        KafkaConsumer<String, String> source = consumer(bootstrap, group, "read_committed", in, sourceConfig);
        KafkaProducer<String, String> p = producer(bootstrap, "ctp-producer");
        p.initTransactions();
        TopicPartition inPartition = new TopicPartition(in, 0);
        for (boolean commit : List.of(true, false)) {
            List<String> values = take(source, 2);
            System.out.println("consumed: " + list(values));
            p.beginTransaction();
            List<String> upper = new ArrayList<>();
            for (String v : values) {
                upper.add(v.toUpperCase());
                p.send(new ProducerRecord<>(out, v.toUpperCase()));
            }
            p.flush();
            long next = source.position(inPartition);
            p.sendOffsetsToTransaction(Map.of(inPartition, new OffsetAndMetadata(next)), source.groupMetadata());
            if (commit) {
                p.commitTransaction();
            } else {
                p.abortTransaction();
            }
            System.out.println((commit ? "committed" : "aborted") + ": produced " + list(upper) + ", offsets to " + next);
        }
        OffsetAndMetadata committed = source.committed(Set.of(inPartition), CALL_TIMEOUT).get(inPartition);
        System.out.println(group + " committed offsets: [('" + in + "', 0, " + committed.offset() + ")]");
        source.close(CALL_TIMEOUT);
        p.close(CALL_TIMEOUT);

        Properties noAutoCommit = new Properties();
        noAutoCommit.put("enable.auto.commit", "false");
        KafkaConsumer<String, String> resumed = consumer(bootstrap, group, "read_committed", in, noAutoCommit);
        System.out.println("a new member of " + group + " resumes with: " + list(poll(resumed, 2)));
        resumed.close(CALL_TIMEOUT);
        KafkaConsumer<String, String> rc = consumer(bootstrap, "ctp-check-rc", "read_committed", out);
        System.out.println("read_committed on " + out + ": " + list(poll(rc, 2)));
        rc.close(CALL_TIMEOUT);
        KafkaConsumer<String, String> ru = consumer(bootstrap, "ctp-check-ru", "read_uncommitted", out);
        System.out.println("read_uncommitted on " + out + ": " + list(poll(ru, 4)));
        ru.close(CALL_TIMEOUT);
    }

    /**
     * seed_experiment.py's steps and lines; `topic` also names the transactional id and the groups (the
     * default topic keeps the article's names), so that runs on one cluster do not meet.
     */
    static void seed(String bootstrap, int replicationFactor, String topic) throws Exception {
        String prefix = topic.equals("tx-demo") ? "seed" : topic;
        createTopic(bootstrap, topic, replicationFactor);
        // The three sends of each transaction wait for the flush and go out as one batch, so the log's batch
        // boundaries are the program's and not the client's timing (the tests compare them with real Kafka's).
        Properties oneBatch = new Properties();
        oneBatch.put("linger.ms", "1000");
        KafkaProducer<String, String> p = producer(bootstrap, topic + "-producer", oneBatch);
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < 3; i++) {
            p.send(new ProducerRecord<>(topic, "k", "inflight-" + i));
        }
        p.flush();
        // commitTransaction() has not been called yet.
        KafkaConsumer<String, String> ru = consumer(bootstrap, prefix + "-ru", "read_uncommitted", topic);
        KafkaConsumer<String, String> rc = consumer(bootstrap, prefix + "-rc", "read_committed", topic);
        System.out.println("read_uncommitted sees (before commit): " + list(poll(ru, 3)));
        System.out.println("read_committed sees (before commit): " + list(poll(rc, 0)));

        p.commitTransaction();
        Thread.sleep(1000);
        System.out.println("read_committed sees (after commit): " + list(poll(rc, 3)));

        p.beginTransaction();
        for (int i = 0; i < 3; i++) {
            p.send(new ProducerRecord<>(topic, "k", "aborted-" + i));
        }
        p.flush();
        List<String> seen = poll(ru, 3); // not aborted yet
        p.abortTransaction();
        System.out.println("read_uncommitted sees (before abort, transiently): " + list(seen));
        System.out.println("read_committed sees (after abort): " + list(poll(rc, 0)) + "  (should be empty)");
        ru.close(CALL_TIMEOUT);
        rc.close(CALL_TIMEOUT);
        p.close(CALL_TIMEOUT);

        System.out.println();
        KafkaConsumer<String, String> freshRu = consumer(bootstrap, prefix + "-fresh-ru", "read_uncommitted", topic);
        System.out.println("fresh read_uncommitted consumer reading from offset 0 sees ALL raw records:");
        System.out.println("  " + list(poll(freshRu, 6)));
        KafkaConsumer<String, String> freshRc = consumer(bootstrap, prefix + "-fresh-rc", "read_committed", topic);
        System.out.println("fresh read_committed consumer reading from offset 0 sees only:");
        System.out.println("  " + list(poll(freshRc, 3)));
        freshRu.close(CALL_TIMEOUT);
        freshRc.close(CALL_TIMEOUT);
    }

    static int leader(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS)
                .get(topic).partitions().get(0).leader().id();
    }

    /**
     * broker_crash.py's steps and lines: the consumer subscribes first (its group's offsets topic is created
     * while every broker is up), and the harness crashes a broker between the flush and the commit. One
     * admin client throughout: a new one could not bootstrap from a crashed broker 0.
     */
    static void crash(String bootstrap) throws Exception {
        String topic = "crash-demo";
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        try (Admin admin = Admin.create(config(bootstrap))) {
            NewTopic t = new NewTopic(topic, 1, (short) 3);
            admin.createTopics(List.of(t)).all().get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            System.out.println("leader of " + topic + "/0: " + leader(admin, topic));
            KafkaConsumer<String, String> c = consumer(bootstrap, "crash-rc", "read_committed", topic);
            // Joins the group now, as librdkafka's subscribe does in the background: the topic is empty yet.
            long deadline = System.currentTimeMillis() + READ_TIMEOUT_MS;
            while (c.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                c.poll(Duration.ofMillis(100));
            }
            KafkaProducer<String, String> p = producer(bootstrap, "crash-demo-producer");
            p.initTransactions();
            p.beginTransaction();
            for (String v : List.of("c-0", "c-1")) {
                p.send(new ProducerRecord<>(topic, v)).get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
            System.out.println("produced ['c-0', 'c-1'], not committed");
            System.out.flush();
            String line = in.readLine();
            if (!"crashed".equals(line)) {
                throw new IllegalStateException("the harness did not say it crashed a broker (read " + line + ")");
            }
            p.commitTransaction();
            System.out.println("committed");
            System.out.println("leader of " + topic + "/0: " + leader(admin, topic));
            System.out.println("read_committed sees: " + list(poll(c, 2)));
            c.close(CALL_TIMEOUT);
            p.close(CALL_TIMEOUT);
        }
    }

    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "seed" -> seed(args[1], args.length > 2 ? Integer.parseInt(args[2]) : 1, args.length > 3 ? args[3] : "tx-demo");
                case "ctp" -> ctp(args[1]);
                case "crash" -> crash(args[1]);
                default -> throw new IllegalArgumentException("unknown experiment " + args[0]);
            }
        } catch (Throwable e) {
            // Printed here: JDK 17's source launcher, trimming its own frames off an exception that another
            // thread made, fails with "0 > -7" and hides it.
            e.printStackTrace();
            System.exit(1);
        }
    }
}
