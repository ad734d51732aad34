//! `/v1/chat/completions` and `/v1/models` driven by OpenAI's own Python client
//! (`tests/openai/chat.py`, the `openai` package from PyPI): the answer whole and streamed
//! is the greedy continuation the library itself gives for the conversation, laid out by
//! the model's chat template (SmolLM2) or as plain text (the shipped character model); a
//! stop text ends it just before; a missing model is the client's `NotFoundError`.
//! `scripts/install_clients.sh` installs the client; where it could not, it left its reason
//! in `tests/openai/.unavailable`, and this test prints it and passes.

use std::process::Command;

use candle_core::Device;
use posenc_llama::chat::Message;
use posenc_lm::causal::CausalLm;
use posenc_lm::sample::{generate, Sampling};

use crate::common::server;

/// The greedy answer of `lm` to one user message, by the library: its chat template's
/// prompt (or the message itself), `max` tokens, cut at the end-of-sequence token.
fn library_answer(lm: &CausalLm, message: &str, max: usize) -> String {
    let text = match &lm.chat {
        Some(template) => template.render(&[Message::user(message)], true).unwrap(),
        None => message.to_string(),
    };
    let ids = lm.encode_prompt(&text).unwrap();
    let mut out = generate(&lm.model, &ids, max, Sampling::greedy()).unwrap();
    if let Some(end) = out.iter().position(|&t| Some(t) == lm.eos) {
        out.truncate(end);
    }
    lm.decode(&out).unwrap()
}

#[test]
fn openai_client_chats_whole_and_streamed() {
    let Some(python) =
        posenc_testkit::python_client("openai", "openai_client_chats_whole_and_streamed")
    else {
        return;
    };
    let repo = posenc_testkit::repo();
    let s = server(&[repo.join("docs")], 2);
    let shipped = posenc_lm::run::shipped_model();
    let shipped_name = shipped.file_name().unwrap().to_string_lossy().into_owned();
    let mut cases = vec![(shipped_name, shipped.display().to_string(), "ROMEO:")];
    if posenc_llama::model::fetched_smollm2().is_ok() {
        cases.push((
            "smollm2".into(),
            "smollm2".into(),
            "What is the capital of France?",
        ));
    }
    for (name, spec, prompt) in cases {
        let run = Command::new(&python)
            .arg(repo.join("tests/openai/chat.py"))
            .args([s.url().as_str(), &name, prompt])
            .output()
            .expect("python runs");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{name}: the client failed:\n{stderr}");
        let got: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        assert!(
            got["models"]
                .as_array()
                .unwrap()
                .contains(&name.as_str().into()),
            "{got}"
        );

        let lm = CausalLm::load(&spec, posenc_llama::Precision::F32, &Device::Cpu).unwrap();
        let want = library_answer(&lm, prompt, 24);
        let (whole, streamed) = (&got["whole"], &got["streamed"]);
        assert_eq!(whole["content"], want.as_str(), "{name}: {got}");
        assert_eq!(whole["role"], "assistant");
        assert_eq!(streamed["content"], want.as_str(), "{name}: {got}");
        assert!(streamed["pieces"].as_u64().unwrap() > 1, "{got}");
        assert_eq!(streamed["roles"], serde_json::json!(["assistant"]));
        // 24 tokens drawn, or the end-of-sequence token first.
        let reason = whole["finish_reason"].as_str().unwrap();
        let completion = whole["usage"]["completion_tokens"].as_u64().unwrap();
        assert!(
            (reason == "length" && completion == 24) || (reason == "stop" && completion < 24),
            "{got}"
        );
        assert_eq!(streamed["finish_reason"], reason);
        assert_eq!(streamed["usage"], whole["usage"]);
        let usage = &whole["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(usage["prompt_tokens"].as_u64().unwrap() + completion)
        );
        // The answer ends just before the stop text's first place.
        let stop = got["stop"].as_str().unwrap();
        let before = &want[..want.find(stop).unwrap()];
        assert_eq!(got["stopped"]["content"], before, "{name}: {got}");
        assert_eq!(got["stopped"]["finish_reason"], "stop");
        assert_eq!(got["missing"]["status"], 404, "{got}");
        let missing = got["missing"]["message"].as_str().unwrap();
        assert!(missing.contains("no-such-model"), "{missing}");
    }
}
