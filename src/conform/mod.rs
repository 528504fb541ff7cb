//! `txnsim conform`: clients' read_committed filters held to Kafka's rules (issue 48). The catalogue of
//! layouts (`layouts`) is built through the engine in-process (`build`), served on the wire by the same
//! driver as `txnsim serve` (`txnsim_kafka::server::serve_while`), read by each client's adapter once per
//! read and isolation level (`adapter`), and every delivery compared with the engine consumer's
//! (`report`). docs/conform.md has both contracts: the adapter protocol and the layout script.

pub mod adapter;
pub mod apache_kafka;
pub mod build;
pub mod layouts;
pub mod report;

use adapter::{Outcome, Request};
use build::Reference;
use report::{Client, Matrix, Run, Verdict};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

/// The catalogue in this checkout, so `txnsim conform` works from any directory.
pub const DEFAULT_LAYOUTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conform/layouts.txt");
/// Records one read may deliver before the adapter stops (the request's `max_records`).
const MAX_RECORDS: u64 = 1000;

#[derive(clap::Args, Debug)]
pub struct ConformArgs {
    /// An adapter command, run through `sh -c` once per read (docs/conform.md); repeat for more clients.
    #[arg(long = "client", value_name = "CMD", required = true)]
    pub clients: Vec<String>,
    /// The layout catalogue (default: conform/layouts.txt of this checkout).
    #[arg(long, value_name = "FILE")]
    pub layouts: Option<PathBuf>,
    /// Only these layouts (comma-separated names).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Adapter runs at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Each read's `timeout_ms`: how long an adapter polls before it gives up (it is killed 15 s later).
    #[arg(long, value_name = "MS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub timeout_ms: u64,
    /// Also write the report as JSON (txnsim-conform-report/v1) to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the report as a self-contained HTML page to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// `apache-kafka:1|3`: also read every layout on a Kafka 4.3.1 cluster started for the run
    /// (apache_kafka.rs, docs/conform.md).
    #[arg(long, value_name = "apache-kafka:N")]
    pub target: Option<String>,
}

/// Exit 0: every cell passes or is unsupported; 1: a cell fails; 2: bad input or an adapter error.
pub fn run(args: &ConformArgs) -> ExitCode {
    match run_checked(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_checked(args: &ConformArgs) -> Result<ExitCode, String> {
    let target = args.target.as_deref().map(apache_kafka::parse).transpose()?;
    let path = args.layouts.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_LAYOUTS));
    let file = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("--layouts {file}: {e}"))?;
    let mut all = layouts::parse(&file, &text)?;
    if !args.only.is_empty() {
        if let Some(unknown) = args.only.iter().find(|n| !all.iter().any(|l| &l.name == *n)) {
            let names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
            return Err(format!("--only {unknown}: no such layout in {file} (it has {})", names.join(", ")));
        }
        all.retain(|l| args.only.contains(&l.name));
    }
    let (cluster, references) = build::build(&all, &file)?;
    // Outputs are opened before any read: a path that cannot be written is bad input before minutes of reads.
    let json_out = args.json.as_deref().map(create).transpose()?;
    let html_out = args.html.as_deref().map(create).transpose()?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let now_ms = cluster.now_ms;
    let ends = apache_kafka::engine_ends(&cluster, &references);
    let (brokers, controller, timers) = cluster.into_brokers();
    let driver =
        txnsim_kafka::Driver::from_cluster(brokers, Some(controller), timers, &[(addr.ip().to_string(), addr.port())]);
    println!(
        "txnsim conform: {} layout(s), {} read(s) at two isolation levels, {} client(s), against txnsim serve on {addr}",
        all.len(),
        references.len() / 2,
        args.clients.len()
    );
    let bootstrap = addr.to_string();
    let (runs, violations) = txnsim_kafka::server::serve_while(driver, listener, now_ms, || {
        run_all(&args.clients, &references, &bootstrap, args)
    });
    let mut clients: Vec<Client> = args.clients.iter().map(|c| Client { command: c.clone(), name: None }).collect();
    for (i, name) in runs.iter().filter_map(|(run, name)| name.clone().map(|n| (run.client, n))) {
        clients[i].name.get_or_insert(name);
    }
    let runs: Vec<Run> = runs.into_iter().map(|(run, _)| run).collect();
    let names: Vec<(String, String)> = all.iter().map(|l| (l.name.clone(), l.what.clone())).collect();
    // The repro names the catalogue only when it is not the default.
    let layouts_arg = args.layouts.as_ref().map(|_| file.as_str());
    if let Some(nodes) = target {
        let real = apache_kafka::confirm(nodes, args, &path, &all, &mut clients, &runs, &ends)?;
        print!("{}", real.text);
        write(json_out, &real.json)?;
        write(html_out, &real.html)?;
        violations.iter().for_each(|v| println!("serve: VIOLATION {v}"));
        return Ok(ExitCode::from(if violations.is_empty() { real.code } else { real.code.max(1) }));
    }
    let matrix = Matrix { clients: &clients, layouts: &names, runs: &runs, layouts_arg };
    print!("{}", matrix.text());
    write(json_out, &serde_json::to_string_pretty(&matrix.json()).expect("JSON"))?;
    write(html_out, &matrix.html())?;
    for v in &violations {
        println!("serve: VIOLATION {v}");
    }
    let worst = runs.iter().map(|r| r.verdict.clone()).max().unwrap_or(Verdict::Pass);
    Ok(match worst {
        Verdict::AdapterError => ExitCode::from(2),
        _ if !violations.is_empty() => ExitCode::from(1),
        Verdict::Fail => ExitCode::from(1),
        Verdict::Pass | Verdict::Unsupported => ExitCode::SUCCESS,
    })
}

type Named = (Run, adapter::ClientName);

/// Every client on every reference, `--jobs` at a time; in client, then reference order.
pub(crate) fn run_all(clients: &[String], references: &[Reference], bootstrap: &str, args: &ConformArgs) -> Vec<Named> {
    let jobs: Vec<(usize, &Reference)> =
        (0..clients.len()).flat_map(|c| references.iter().map(move |r| (c, r))).collect();
    let next = Mutex::new(0);
    let done: Mutex<Vec<(usize, Named)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| loop {
                let i = {
                    let mut n = next.lock().expect("not poisoned");
                    *n += 1;
                    *n - 1
                };
                let Some((client, reference)) = jobs.get(i) else { return };
                let named = run_one(*client, &clients[*client], reference, bootstrap, args.timeout_ms);
                done.lock().expect("not poisoned").push((i, named));
            });
        }
    });
    let mut done = done.into_inner().expect("not poisoned");
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, named)| named).collect()
}

fn run_one(client: usize, command: &str, reference: &Reference, bootstrap: &str, timeout_ms: u64) -> Named {
    let request = Request {
        format: adapter::FORMAT,
        bootstrap: bootstrap.to_string(),
        topic: reference.topic.clone(),
        partition: reference.partition,
        start_offset: reference.from,
        isolation: report::isolation(reference),
        stop_offset: reference.position,
        max_records: MAX_RECORDS,
        timeout_ms,
    };
    let (name, outcome): (_, Outcome) = adapter::run(command, &request);
    let (verdict, detail) = report::judge(reference, &outcome);
    (Run { client, reference: reference.clone(), outcome, verdict, detail }, name)
}

fn create(path: &Path) -> Result<(std::fs::File, PathBuf), String> {
    std::fs::File::create(path).map(|f| (f, path.to_path_buf())).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(out: Option<(std::fs::File, PathBuf)>, text: &str) -> Result<(), String> {
    use std::io::Write;
    if let Some((mut f, path)) = out {
        f.write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
