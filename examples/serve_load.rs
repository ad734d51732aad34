//! The explorer under load: 32 clients at once asking for encodings' views (d_model 512,
//! 8 heads, 2 048 positions: rope, alibi, sinusoidal and t5 in turn) for 20 seconds,
//! against a server in this process on 127.0.0.1. Counts every answer by status, times the
//! views served, and reads the process's peak resident memory (server and clients).
//!
//! ```sh
//! cargo run --release --example serve_load -- --seconds 20 --clients 32 --out docs/explorer/load.json
//! ```
//!
//! The record is one JSON object (`pandas.json_normalize` reads it).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let (mut seconds, mut clients, mut out) = (20u64, 32usize, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => seconds = value()?.parse()?,
            "--clients" => clients = value()?.parse()?,
            "--out" => out = Some(std::path::PathBuf::from(value()?)),
            other => bail!("unknown argument {other} (--seconds N --clients N --out FILE)"),
        }
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let server = posenc_serve::Server::start(posenc_serve::Options {
        port: 0,
        workers,
        ..Default::default()
    })?;
    let url = format!("{}api/encoding", server.url());
    let kinds = ["rope", "alibi", "sinusoidal", "t5"];
    let rss_before = peak_rss_mb();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let answers: Vec<(u16, f64)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|c| {
                let url = &url;
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    let mut i = c;
                    while Instant::now() < deadline {
                        let body = serde_json::json!({
                            "encoding": kinds[i % kinds.len()],
                            "d_model": 512, "heads": 8, "len": 2048,
                        });
                        i += 1;
                        let asked = Instant::now();
                        let status = match ureq::post(url)
                            .set("content-type", "application/json")
                            .send_string(&body.to_string())
                        {
                            Ok(r) => {
                                let _ = r.into_string();
                                200
                            }
                            Err(ureq::Error::Status(code, _)) => code,
                            // A transport error (a refused or reset connection) is counted
                            // as 0: the load must give none.
                            Err(_) => 0,
                        };
                        seen.push((status, asked.elapsed().as_secs_f64() * 1e3));
                    }
                    seen
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let count = |code: u16| answers.iter().filter(|(s, _)| *s == code).count();
    let mut served: Vec<f64> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, ms)| *ms)
        .collect();
    served.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        served
            .get(((served.len() as f64 - 1.0) * q) as usize)
            .copied()
    };
    let other = answers.len() - count(200) - count(503);
    let record = serde_json::json!({
        "clients": clients,
        "seconds": wall,
        "workers": workers,
        "requests": answers.len(),
        "ok": count(200),
        "busy_503": count(503),
        "other": other,
        "ok_per_s": count(200) as f64 / wall,
        "ok_ms_median": quantile(0.5),
        "ok_ms_p95": quantile(0.95),
        "peak_rss_mb_before": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "still_answers": ureq::get(&format!("{}api/kinds", server.url())).call().is_ok(),
    });
    println!("{}", serde_json::to_string_pretty(&record)?);
    if let Some(out) = out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        posenc_io::write_atomic(&out, format!("{record:#}\n").as_bytes())?;
    }
    if other > 0 {
        bail!("{other} answers were neither a view nor a 503");
    }
    Ok(())
}
