//! The layout script (`conform/layouts.txt`, contract 2 of docs/conform.md): a catalogue of logs, each a
//! list of producer steps and the reads clients make of the result. Parsed whole before anything runs; a
//! bad line is one error naming the file and line.

use std::collections::BTreeMap;
use txnsim_engine::record::CompressionType;

#[derive(Clone, Debug)]
pub struct Layout {
    pub name: String,
    /// The first comment line after `## NAME`: what the layout tests.
    pub what: String,
    /// Where `## NAME` is, for errors while building.
    pub line: usize,
    pub steps: Vec<(usize, Step)>,
    pub reads: Vec<Read>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Producer {
    pub transactional: bool,
    /// `compression.type`: the codec of every data batch the producer sends.
    pub compression: CompressionType,
    pub transaction_version: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Topic { topic: String, partitions: u32, configs: Vec<(String, String)> },
    Producer { producer: String, spec: Producer },
    Init(String),
    Begin(String),
    Flush(String),
    Commit(String),
    Abort(String),
    Send { producer: String, topic: String, partition: u32, value: String },
    Roll { topic: String, partition: u32 },
    DeleteRecords { topic: String, partition: u32, offset: u64 },
}

/// `read T PART FROM`, in the layout's own topic names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub topic: String,
    pub partition: u32,
    pub from: u64,
}

/// The layout's names as they are on a cluster: topics `conform-NAME-T`, transactional ids `NAME-P`.
pub fn cluster_topic(layout: &str, topic: &str) -> String {
    format!("conform-{layout}-{topic}")
}

pub fn transactional_id(layout: &str, producer: &str) -> String {
    format!("{layout}-{producer}")
}

/// Parses a whole catalogue; `file` names it in errors (`FILE:LINE: why`).
pub fn parse(file: &str, text: &str) -> Result<Vec<Layout>, String> {
    let mut layouts: Vec<Layout> = Vec::new();
    // Per layout: its topics' partition counts and its producers (transactional or not).
    let (mut topics, mut producers) = (BTreeMap::new(), BTreeMap::new());
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at = |why: String| format!("{file}:{line}: {why}");
        let words: Vec<&str> = raw.split_whitespace().collect();
        if let Some(name) = raw.strip_prefix("## ") {
            let name = name.trim();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                return Err(at(format!("layout name {name:?}: lowercase letters, digits and '-' only")));
            }
            if layouts.iter().any(|l| l.name == name) {
                return Err(at(format!("layout {name} is defined twice")));
            }
            (topics, producers) = (BTreeMap::new(), BTreeMap::new());
            let layout = Layout { name: name.into(), what: String::new(), line, steps: vec![], reads: vec![] };
            layouts.push(layout);
            continue;
        }
        if words.is_empty() {
            continue;
        }
        let current = layouts.last_mut();
        if words[0].starts_with('#') {
            if let Some(l) = current.filter(|l| l.what.is_empty() && l.steps.is_empty()) {
                l.what = raw.trim_start_matches('#').trim().to_string();
            }
            continue;
        }
        let Some(layout) = current else {
            return Err(at(format!("{:?} comes before the first '## NAME'", words[0])));
        };
        if layout.what.is_empty() {
            return Err(at(format!(
                "layout {} must say what it tests: a '# ...' line after '## {}'",
                layout.name, layout.name
            )));
        }
        let known = Known { topics: &topics, producers: &producers };
        match step(&words, &known).map_err(at)? {
            Parsed::Read(r) => layout.reads.push(r),
            Parsed::Step(s) => {
                let twice = match &s {
                    Step::Topic { topic, partitions, .. } => {
                        topics.insert(topic.clone(), *partitions).map(|_| format!("topic {topic} is created twice"))
                    }
                    Step::Producer { producer, spec } => producers
                        .insert(producer.clone(), spec.transactional)
                        .map(|_| format!("producer {producer} is declared twice")),
                    _ => None,
                };
                if let Some(why) = twice {
                    return Err(at(why));
                }
                layout.steps.push((line, s));
            }
        }
    }
    match layouts.iter().find(|l| l.reads.is_empty()) {
        Some(l) => Err(format!("{file}:{}: layout {} has no 'read T PART FROM'", l.line, l.name)),
        None if layouts.is_empty() => Err(format!("{file}: no layouts ('## NAME')")),
        None => Ok(layouts),
    }
}

/// What a layout has declared so far.
struct Known<'a> {
    topics: &'a BTreeMap<String, u32>,
    /// Producer name to whether it is transactional.
    producers: &'a BTreeMap<String, bool>,
}

enum Parsed {
    Step(Step),
    Read(Read),
}

const SYNTAX: &str = "steps are topic, producer, plain, init, begin, flush, commit, abort, send, roll, \
                      delete-records and read (docs/conform.md)";

fn step(words: &[&str], known: &Known) -> Result<Parsed, String> {
    let producer = |name: &str, transactional_only: bool| match known.producers.get(name) {
        None => Err(format!("{} {name}: no producer {name} is declared above", words[0])),
        Some(false) if transactional_only => {
            Err(format!("{} {name}: {name} is a plain (non-transactional) producer", words[0]))
        }
        Some(_) => Ok(name.to_string()),
    };
    let partition = |topic: &str, part: &str| -> Result<(String, u32), String> {
        let n = *known.topics.get(topic).ok_or(format!("no topic {topic} is created above"))?;
        let p: u32 = number(part, "a partition")?;
        if p >= n {
            return Err(format!("topic {topic} has {n} partition(s): no partition {p}"));
        }
        Ok((topic.to_string(), p))
    };
    let parsed = match words {
        ["topic", topic, n, configs @ ..] => {
            let partitions: u32 = number(n, "a partition count")?;
            if !(1..=64).contains(&partitions) {
                return Err(format!("topic {topic}: 1 to 64 partitions, not {partitions}"));
            }
            let configs = configs.iter().map(|kv| key_value(kv)).collect::<Result<_, _>>()?;
            Step::Topic { topic: topic.to_string(), partitions, configs }
        }
        [kind @ ("producer" | "plain"), name, settings @ ..] => {
            let spec = producer_spec(*kind == "producer", settings)?;
            Step::Producer { producer: name.to_string(), spec }
        }
        ["init", p] => Step::Init(producer(p, true)?),
        ["begin", p] => Step::Begin(producer(p, true)?),
        ["commit", p] => Step::Commit(producer(p, true)?),
        ["abort", p] => Step::Abort(producer(p, true)?),
        ["flush", p] => Step::Flush(producer(p, false)?),
        ["send", p, topic, part, value] => {
            let (topic, partition) = partition(topic, part)?;
            Step::Send { producer: producer(p, false)?, topic, partition, value: value.to_string() }
        }
        ["roll", topic, part] => {
            let (topic, partition) = partition(topic, part)?;
            Step::Roll { topic, partition }
        }
        ["delete-records", topic, part, offset] => {
            let (topic, partition) = partition(topic, part)?;
            Step::DeleteRecords { topic, partition, offset: number(offset, "an offset")? }
        }
        ["read", topic, part, from] => {
            let (topic, partition) = partition(topic, part)?;
            return Ok(Parsed::Read(Read { topic, partition, from: number(from, "an offset")? }));
        }
        _ => return Err(format!("cannot read {:?}: {SYNTAX}", words.join(" "))),
    };
    Ok(Parsed::Step(parsed))
}

fn producer_spec(transactional: bool, settings: &[&str]) -> Result<Producer, String> {
    let mut spec = Producer { transactional, compression: CompressionType::None, transaction_version: 2 };
    for kv in settings {
        match key_value(kv)? {
            (k, v) if k == "compression.type" && CompressionType::from_name(&v).is_some() => {
                spec.compression = CompressionType::from_name(&v).expect("just checked")
            }
            (k, v) if k == "transaction.version" && transactional && (v == "1" || v == "2") => {
                spec.transaction_version = v.parse().expect("1 or 2")
            }
            (k, v) => {
                return Err(format!(
                    "{k}={v}: a producer takes compression.type={} and (transactional only) transaction.version=1|2",
                    CompressionType::ALL.map(CompressionType::name).join("|")
                ))
            }
        }
    }
    Ok(spec)
}

fn key_value(kv: &str) -> Result<(String, String), String> {
    match kv.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{kv:?} is not KEY=VALUE")),
    }
}

fn number<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{s:?} is not {what}"))
}
