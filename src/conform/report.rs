//! What a client delivered held to what Kafka's rules deliver, and the matrix client x layout as text,
//! JSON (txnsim-conform-report/v1) and a self-contained HTML table.

use super::adapter::{Delivered, Outcome};
use super::build::Reference;
use serde::Serialize;
use serde_json::{json, Value};

pub const FORMAT: &str = "txnsim-conform-report/v1";

/// One read's verdict, worst last (a cell takes its worst read's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Unsupported,
    /// A wrong delivery, a wrong position, or the client's own error.
    Fail,
    AdapterError,
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Unsupported => "unsupported",
            Verdict::Fail => "FAIL",
            Verdict::AdapterError => "ADAPTER ERROR",
        }
    }
}

/// The verdict of one read and, unless it passed, what went wrong first (one line).
pub fn judge(reference: &Reference, outcome: &Outcome) -> (Verdict, Option<String>) {
    match outcome {
        Outcome::Read { records, position, position_unknown } => {
            if let Some(wrong) = first_wrong(&reference.records, records) {
                return (Verdict::Fail, Some(wrong));
            }
            match (position, position_unknown) {
                (Some(p), _) if *p != reference.position => {
                    let why =
                        format!("wrong position: {p}, Kafka's rules leave the consumer at {}", reference.position);
                    (Verdict::Fail, Some(why))
                }
                (Some(_), _) => (Verdict::Pass, None),
                // The records were right; the client's API cannot tell its position.
                (None, why) => {
                    (Verdict::Pass, Some(format!("position not reported: {}", why.as_deref().unwrap_or("no reason"))))
                }
            }
        }
        Outcome::Unsupported { why } => (Verdict::Unsupported, Some(why.clone())),
        Outcome::ClientError { error } => (Verdict::Fail, Some(format!("the client failed: {error}"))),
        Outcome::AdapterError { why, .. } => (Verdict::AdapterError, Some(format!("adapter error: {why}"))),
    }
}

/// The first delivery that departs from `expected`, walking both in delivery order.
fn first_wrong(expected: &[(u64, String)], got: &[Delivered]) -> Option<String> {
    let show = |o: u64, v: &str| format!("offset {o} ({v:?})");
    for i in 0..expected.len().max(got.len()) {
        let e = expected.get(i);
        let g = got.get(i);
        match (e, g) {
            (Some((eo, ev)), Some(g)) if *eo == g.offset && *ev == g.value => continue,
            (Some((eo, ev)), Some(g)) if *eo == g.offset => {
                return Some(format!("wrong value at offset {eo}: {:?}, the log holds {ev:?}", g.value))
            }
            (_, Some(g)) if got[..i].iter().any(|d| d.offset == g.offset) => {
                return Some(format!("duplicate: {} delivered again (delivery {})", show(g.offset, &g.value), i + 1))
            }
            (_, Some(g)) if !expected.iter().any(|(o, _)| *o == g.offset) => {
                return Some(format!("extra: {} delivered, Kafka's rules do not deliver it", show(g.offset, &g.value)))
            }
            (Some((eo, ev)), _) if !got.iter().any(|d| d.offset == *eo) => {
                return Some(format!("missing: {} not delivered", show(*eo, ev)))
            }
            (Some((eo, _)), Some(g)) => {
                return Some(format!("out of order: offset {} delivered where offset {eo} was due", g.offset))
            }
            (None, _) | (_, None) => unreachable!("a delivery beyond the expected ones is extra or a duplicate"),
        }
    }
    None
}

/// One run of one client on one read.
#[derive(Clone, Debug)]
pub struct Run {
    pub client: usize,
    pub reference: Reference,
    pub outcome: Outcome,
    pub verdict: Verdict,
    pub detail: Option<String>,
}

impl Run {
    pub fn read_name(&self) -> String {
        let r = &self.reference;
        format!("{}/{} from {} {}", r.topic, r.partition, r.from, isolation(r))
    }
}

pub fn isolation(r: &Reference) -> &'static str {
    match r.isolation {
        txnsim_engine::IsolationLevel::ReadCommitted => "read_committed",
        txnsim_engine::IsolationLevel::ReadUncommitted => "read_uncommitted",
    }
}

/// A client under test: its command and what its adapter said it is.
#[derive(Clone, Debug)]
pub struct Client {
    pub command: String,
    pub name: Option<(String, String)>,
}

impl Client {
    /// The client as both reports' JSON names it.
    pub fn json(&self) -> Value {
        let (name, version) = self.name.clone().unzip();
        json!({"command": self.command, "client": name, "version": version})
    }

    pub fn label(&self) -> String {
        match &self.name {
            Some((name, version)) => format!("{name} {version}"),
            None => self.command.clone(),
        }
    }
}

/// A cell of the matrix: the worst of its reads, and the first of its reads with that verdict.
pub fn cell<'a>(runs: &'a [Run], client: usize, layout: &str) -> (Verdict, Option<&'a Run>) {
    let mine = runs.iter().filter(|r| r.client == client && r.reference.layout == layout);
    let worst = mine.clone().map(|r| r.verdict.clone()).max().unwrap_or(Verdict::Pass);
    let first = mine.clone().find(|r| r.verdict == worst && r.verdict != Verdict::Pass);
    (worst, first)
}

/// `sh`'s single quotes around `s`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command that reruns one cell.
pub fn repro(client: &Client, layout: &str, layouts_arg: Option<&str>) -> String {
    let file = layouts_arg.map_or(String::new(), |f| format!(" --layouts {}", shell_quote(f)));
    format!("txnsim conform --client {}{file} --only {layout}", shell_quote(&client.command))
}

/// The clients' legend and the layout × client grid of one word per cell, as both reports print it.
pub fn grid(clients: &[Client], layouts: &[(String, String)], word: impl Fn(usize, &str) -> &'static str) -> String {
    let mut out = String::new();
    for (i, c) in clients.iter().enumerate() {
        out += &format!("client [{}] {}: {}\n", i + 1, c.label(), c.command);
    }
    let width = layouts.iter().map(|(n, _)| n.len()).max().unwrap_or(6).max(6);
    out += &format!("{:<width$}", "layout");
    for i in 0..clients.len() {
        out += &format!("  {:<13}", format!("[{}]", i + 1));
    }
    out = out.trim_end().to_string() + "\n";
    for (name, _) in layouts {
        out += &format!("{name:<width$}");
        for i in 0..clients.len() {
            out += &format!("  {:<13}", word(i, name));
        }
        out = out.trim_end().to_string() + "\n";
    }
    out
}

pub struct Matrix<'a> {
    pub clients: &'a [Client],
    pub layouts: &'a [(String, String)],
    pub runs: &'a [Run],
    pub layouts_arg: Option<&'a str>,
}

impl Matrix<'_> {
    pub fn text(&self) -> String {
        let mut out = grid(self.clients, self.layouts, |i, name| cell(self.runs, i, name).0.word());
        for (i, c) in self.clients.iter().enumerate() {
            for (name, _) in self.layouts {
                if let (Verdict::Fail | Verdict::AdapterError | Verdict::Unsupported, Some(run)) =
                    cell(self.runs, i, name)
                {
                    out += &format!("[{}] {name}: {}: {}\n", i + 1, run.read_name(), detail(run));
                    if let Outcome::AdapterError { stderr, .. } = &run.outcome {
                        for line in stderr.lines() {
                            out += &format!("      stderr: {line}\n");
                        }
                    }
                    if run.verdict != Verdict::Unsupported {
                        out += &format!("      repro: {}\n", repro(c, name, self.layouts_arg));
                    }
                }
            }
        }
        for (i, _) in self.clients.iter().enumerate() {
            let unknown: Vec<&str> = self
                .runs
                .iter()
                .filter(|r| r.client == i)
                .filter_map(|r| match &r.outcome {
                    Outcome::Read { position_unknown: Some(why), .. } => Some(why.as_str()),
                    _ => None,
                })
                .collect();
            if let Some(why) = unknown.first() {
                out += &format!("[{}] position not compared in {} read(s): {why}\n", i + 1, unknown.len());
            }
        }
        out + &self.summary() + "\n"
    }

    /// Cells per verdict, in `Verdict` order.
    fn counts(&self) -> [usize; 4] {
        let mut counts = [0; 4];
        for i in 0..self.clients.len() {
            for (name, _) in self.layouts {
                counts[cell(self.runs, i, name).0 as usize] += 1;
            }
        }
        counts
    }

    pub fn summary(&self) -> String {
        let [pass, unsupported, fail, error] = self.counts();
        format!("conform: {pass} pass, {unsupported} unsupported, {fail} failing, {error} adapter error(s)")
    }

    pub fn json(&self) -> Value {
        let clients: Vec<Value> = self.clients.iter().map(Client::json).collect();
        let mut cells = Vec::new();
        for i in 0..self.clients.len() {
            for (name, _) in self.layouts {
                let (verdict, first) = cell(self.runs, i, name);
                let reads: Vec<Value> =
                    self.runs.iter().filter(|r| r.client == i && &r.reference.layout == name).map(read_json).collect();
                let failing = matches!(verdict, Verdict::Fail | Verdict::AdapterError);
                cells.push(json!({
                    "client": i,
                    "layout": name,
                    "verdict": verdict,
                    "first_wrong": first.map(|r| format!("{}: {}", r.read_name(), detail(r))),
                    "repro": failing.then(|| repro(&self.clients[i], name, self.layouts_arg)),
                    "reads": reads,
                }));
            }
        }
        let layouts: Vec<Value> = self.layouts.iter().map(|(n, w)| json!({"name": n, "tests": w})).collect();
        let [pass, unsupported, fail, adapter_error] = self.counts();
        let totals = json!({"pass": pass, "unsupported": unsupported, "fail": fail, "adapter_error": adapter_error});
        json!({"format": FORMAT, "clients": clients, "layouts": layouts, "cells": cells, "totals": totals})
    }

    pub fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut rows = String::new();
        for (name, what) in self.layouts {
            rows += &format!("<tr><th title=\"{}\">{}</th>", esc(what), esc(name));
            for i in 0..self.clients.len() {
                let (verdict, first) = cell(self.runs, i, name);
                let text = first.map_or(String::new(), |r| {
                    format!("<br><small>{}: {}</small>", esc(&r.read_name()), esc(&detail(r)))
                });
                let repro = match verdict {
                    Verdict::Fail | Verdict::AdapterError => {
                        format!("<br><code>{}</code>", esc(&repro(&self.clients[i], name, self.layouts_arg)))
                    }
                    _ => String::new(),
                };
                rows += &format!("<td class=\"{verdict:?}\">{}{text}{repro}</td>", verdict.word());
            }
            rows += "</tr>\n";
        }
        let heads: String = self.clients.iter().map(|c| format!("<th>{}</th>", esc(&c.label()))).collect();
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>txnsim conform</title><style>\
             body{{font-family:sans-serif}} td,th{{border:1px solid #999;padding:4px;vertical-align:top}} \
             table{{border-collapse:collapse}} .Pass{{background:#cfc}} .Unsupported{{background:#eee}} \
             .Fail{{background:#fcc}} .AdapterError{{background:#fc9}}</style></head><body>\n\
             <h1>txnsim conform</h1><p>{}</p>\n<table><tr><th>layout</th>{heads}</tr>\n{rows}</table>\n\
             <script type=\"application/json\" id=\"report\">{}</script></body></html>\n",
            esc(&self.summary()),
            self.json().to_string().replace("</", "<\\/")
        )
    }
}

fn detail(run: &Run) -> String {
    run.detail.clone().unwrap_or_default()
}

fn read_json(run: &Run) -> Value {
    let r = &run.reference;
    json!({
        "topic": r.topic,
        "partition": r.partition,
        "from": r.from,
        "isolation": isolation(r),
        "expected": {"records": r.records.iter().map(|(o, v)| json!({"offset": o, "value": v})).collect::<Vec<_>>(), "position": r.position},
        "outcome": run.outcome,
        "verdict": run.verdict,
        "detail": run.detail,
    })
}
