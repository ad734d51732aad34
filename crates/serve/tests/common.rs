//! A server for one test, and a client for it.

use std::path::{Path, PathBuf};

use posenc_serve::{Options, Server};

/// A server on an ephemeral 127.0.0.1 port over `records` (and the shipped models), with
/// `workers` workers.
pub fn server(records: &[PathBuf], workers: usize) -> Server {
    let options = Options {
        port: 0,
        records: records.to_vec(),
        workers,
        ..Options::default()
    };
    Server::start(options).expect("the server starts")
}

/// `GET url`: the status and the body (as JSON when it is).
pub fn get(server: &Server, path: &str) -> (u16, serde_json::Value) {
    answer(ureq::get(&format!("{}{}", server.url(), path.trim_start_matches('/'))).call())
}

/// `POST url` with a JSON body given as text (so malformed JSON can be sent).
pub fn post(server: &Server, path: &str, body: &str) -> (u16, serde_json::Value) {
    answer(
        ureq::post(&format!("{}{}", server.url(), path.trim_start_matches('/')))
            .set("content-type", "application/json")
            .send_string(body),
    )
}

fn answer(result: Result<ureq::Response, ureq::Error>) -> (u16, serde_json::Value) {
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("no answer: {e}"),
    };
    let status = response.status();
    let text = response.into_string().expect("a body");
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, value)
}

/// The error message of an error answer.
pub fn message(value: &serde_json::Value) -> &str {
    value["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {value}"))
}

/// A fresh directory under the target directory, removed first if it exists.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
