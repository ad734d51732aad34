//! OpenAI's chat completions format, as llama-server offers it, for the language models the
//! explorer lists: `POST /v1/chat/completions` (whole or streamed) and `GET /v1/models`.
//!
//! A model with a chat template (SmolLM2) reads the conversation laid out by it, the
//! assistant's turn opened; one without (a character model of ours) continues the
//! messages' texts, one per line. The settings are OpenAI's names: `max_tokens` (or
//! `max_completion_tokens`), `temperature` (1 unless given), `top_p`, `seed`, `stop` (a text
//! or a list; the answer ends before it) and `stream` (with `stream_options.include_usage`).
//! Fields this server has no use for (`user`, `frequency_penalty`, …) are read and ignored,
//! as llama-server does; `n` other than 1 and `tools` are refused. Errors are OpenAI's
//! `{"error": {"message", "type"}}`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use posenc_llama::chat::Message;
use posenc_lm::causal::CausalLm;
use posenc_lm::sample::{Sampling, Window};
use posenc_lm::text::{StopTexts, TextStream};
use serde::Deserialize;
use serde_json::json;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::app::App;
use crate::error::ApiError;
use crate::models::{MAX_NEW_TOKENS, MAX_PROMPT_CHARS};

/// How many tokens an answer may take when the request does not say.
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// A model's name, as `/v1/models` lists it.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The most tokens to generate (the older name).
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// The most tokens to generate.
    #[serde(default)]
    pub max_completion_tokens: Option<usize>,
    /// 0: greedy; 1 (the default): the model's distribution.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Sample among the most likely tokens holding this much probability.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Seed of the draws [default: 0].
    #[serde(default)]
    pub seed: Option<u64>,
    /// Texts that end the answer, which leaves them out.
    #[serde(default)]
    pub stop: Option<StopField>,
    /// Send the answer as server-sent events, a chunk per piece of text.
    #[serde(default)]
    pub stream: bool,
    /// `{"include_usage": true}`: a last chunk with the token counts.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// How many answers: 1 only.
    #[serde(default)]
    pub n: Option<usize>,
    /// Tools to call: refused, the models have none.
    #[serde(default)]
    pub tools: Option<serde_json::Value>,
}

/// One message of the conversation.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// A text, or a list of parts of which the `text` ones are read.
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: a text, or parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// The text.
    Text(String),
    /// Parts: `{"type": "text", "text": …}`; others are refused.
    Parts(Vec<serde_json::Value>),
}

/// `stop`: one text or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    /// One text.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send the token counts in a last chunk.
    #[serde(default)]
    pub include_usage: bool,
}

/// An [`ApiError`] in OpenAI's shape, so its clients show the message.
pub struct OpenAiError(ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let kind = match self.0.status {
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "server_busy",
            s if s.is_client_error() => "invalid_request_error",
            _ => "server_error",
        };
        let body = json!({"error": {"message": self.0.message, "type": kind, "code": null}});
        let mut response = (self.0.status, Json(body)).into_response();
        if self.0.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

type Shared = State<Arc<App>>;

/// `GET /v1/models`: the language models, as OpenAI lists models.
pub async fn models(State(app): Shared) -> Json<serde_json::Value> {
    let data: Vec<serde_json::Value> = app
        .models
        .lms()
        .into_iter()
        .map(|m| json!({"id": m.name, "object": "model", "created": 0, "owned_by": "posenc"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// A request read and checked: the settings, and the messages as the model's messages.
struct Checked {
    request: ChatRequest,
    messages: Vec<Message>,
    sampling: Sampling,
    max_tokens: usize,
    stops: Vec<String>,
}

fn check(request: ChatRequest) -> Result<Checked, ApiError> {
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("`n` must be 1: one answer a request"));
    }
    if request.tools.is_some() {
        return Err(ApiError::bad_request("`tools`: the models call no tools"));
    }
    if request.messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` is empty: give at least one",
        ));
    }
    let mut messages = Vec::with_capacity(request.messages.len());
    for (i, m) in request.messages.iter().enumerate() {
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part["type"].as_str(), part["text"].as_str()) {
                        (Some("text"), Some(t)) => text += t,
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "message {i}: only text parts are read, got {part}"
                            )))
                        }
                    }
                }
                text
            }
        };
        messages.push(Message {
            role: m.role.clone(),
            content,
        });
    }
    let chars: usize = messages.iter().map(|m| m.content.chars().count()).sum();
    if chars > MAX_PROMPT_CHARS {
        return Err(ApiError::bad_request(format!(
            "the messages are {chars} characters; the most is {MAX_PROMPT_CHARS}"
        )));
    }
    let max_tokens = request
        .max_completion_tokens
        .or(request.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 || max_tokens > MAX_NEW_TOKENS {
        return Err(ApiError::bad_request(format!(
            "max_tokens must be 1 to {MAX_NEW_TOKENS}, got {max_tokens}"
        )));
    }
    let sampling = Sampling {
        temperature: request.temperature.unwrap_or(1.0),
        top_p: request.top_p.filter(|&p| p < 1.0),
        seed: request.seed.unwrap_or(0),
        ..Sampling::default()
    };
    sampling.validate().map_err(ApiError::bad_request)?;
    let stops = match &request.stop {
        None => vec![],
        Some(StopField::One(s)) => vec![s.clone()],
        Some(StopField::Many(list)) => list.clone(),
    };
    Ok(Checked {
        request,
        messages,
        sampling,
        max_tokens,
        stops,
    })
}

/// The prompt's tokens: the conversation laid out by the model's chat template, or, for a
/// model without one, the messages' texts one per line.
fn prompt(lm: &CausalLm, messages: &[Message]) -> Result<Vec<u32>, ApiError> {
    let text = match &lm.chat {
        Some(template) => template
            .render(messages, true)
            .map_err(ApiError::bad_request)?,
        None => messages
            .iter()
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    };
    if text.is_empty() {
        return Err(ApiError::bad_request("the messages hold no text"));
    }
    lm.encode_prompt(&text).map_err(ApiError::bad_request)
}

/// How an answer ended, in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// The end-of-sequence token, or a stop text.
    Stop,
    /// `max_tokens` were drawn.
    Length,
}

impl Finish {
    fn reason(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// Generates the answer, handing `send` each piece of text as it may be shown (a stop text
/// and what could begin one are held back); `send` returning `false` stops it. Returns how
/// it ended and the tokens drawn.
fn answer(
    lm: &CausalLm,
    ids: &[u32],
    checked: &Checked,
    mut send: impl FnMut(&str) -> bool,
) -> Result<(Finish, usize), ApiError> {
    let window = lm.model.max_positions().map(Window::Crop);
    let stops = StopTexts::new(checked.stops.iter().cloned());
    let (mut stream, mut text, mut shown) = (TextStream::default(), String::new(), 0);
    let (mut finish, mut tokens) = (Finish::Length, 0);
    posenc_lm::sample::generate_observed(
        &lm.model,
        ids,
        checked.max_tokens,
        checked.sampling,
        window,
        |_| {},
        |token| {
            tokens += 1;
            if Some(token) == lm.eos {
                finish = Finish::Stop;
                return Ok(false);
            }
            let piece = stream.push(lm, token)?;
            text += &piece;
            let (end, going) = match stops.find(&text, piece.len()) {
                Some((at, _)) => {
                    finish = Finish::Stop;
                    (at, false)
                }
                None => (stops.shown_up_to(&text), true),
            };
            let sent = end <= shown || send(&text[shown..end]);
            shown = shown.max(end);
            Ok(going && sent)
        },
    )
    .map_err(ApiError::bad_request)?;
    if finish == Finish::Length && shown < text.len() {
        // The held-back end never became a stop text.
        send(&text[shown..]);
    }
    Ok((finish, tokens))
}

/// The chunks of one streamed answer.
struct Chunks {
    id: String,
    model: String,
}

impl Chunks {
    fn chunk(&self, choices: serde_json::Value) -> serde_json::Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": created(),
            "model": self.model, "choices": choices,
        })
    }

    /// A chunk of the answer's one choice.
    fn delta(&self, delta: serde_json::Value, finish: Option<&str>) -> Event {
        let choice = json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
        Event::default().data(self.chunk(choice).to_string())
    }
}

fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(app): Shared,
    request: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, OpenAiError> {
    let checked = check(crate::app::body(request)?)?;
    let permit = app.generation_permit()?;
    let shared = app.clone();
    let (lm, ids) = {
        let (name, messages) = (checked.request.model.clone(), checked.messages.clone());
        tokio::task::spawn_blocking(move || {
            let lm = shared.models.lm(&name)?;
            let ids = prompt(&lm, &messages)?;
            Ok::<_, ApiError>((lm, ids))
        })
        .await
        .map_err(|e| ApiError::internal(format!("loading the model failed: {e}")))??
    };
    static ANSWERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = ANSWERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("chatcmpl-{}-{n}", created());
    let model = checked.request.model.clone();
    let prompt_tokens = ids.len();
    let usage = move |completion: usize| {
        json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion,
               "total_tokens": prompt_tokens + completion})
    };
    if !checked.request.stream {
        let (lm, prompt_ids) = (lm.clone(), ids.clone());
        let (text, finish, tokens) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut text = String::new();
            let (finish, tokens) = answer(&lm, &prompt_ids, &checked, |piece| {
                text += piece;
                true
            })?;
            Ok::<_, ApiError>((text, finish, tokens))
        })
        .await
        .map_err(|e| ApiError::internal(format!("the generation failed: {e}")))??;
        let body = json!({
            "id": id, "object": "chat.completion", "created": created(), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish.reason()}],
            "usage": usage(tokens),
        });
        return Ok(Json(body).into_response());
    }
    let include_usage = checked
        .request
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(8);
    let chunks = Chunks { id, model };
    // Room for it: the channel is new.
    let _ = tx.try_send(chunks.delta(json!({"role": "assistant", "content": ""}), None));
    tokio::task::spawn_blocking(move || {
        // Held until the answer ends: a client that closes its stream ends it at the next
        // token, since `send` then fails.
        let outcome = answer(&lm, &ids, &checked, |piece| {
            tx.blocking_send(chunks.delta(json!({"content": piece}), None))
                .is_ok()
        });
        // Freed before the last chunks: a client that has read `[DONE]` finds the server free.
        drop(permit);
        match outcome {
            Ok((finish, tokens)) => {
                let _ = tx.blocking_send(chunks.delta(json!({}), Some(finish.reason())));
                if include_usage {
                    // OpenAI's last chunk: no choices, the counts.
                    let mut last = chunks.chunk(json!([]));
                    last["usage"] = usage(tokens);
                    let _ = tx.blocking_send(Event::default().data(last.to_string()));
                }
            }
            Err(e) => {
                let error = json!({"error": {"message": e.message, "type": "server_error"}});
                let _ = tx.blocking_send(Event::default().data(error.to_string()));
            }
        }
        let _ = tx.blocking_send(Event::default().data("[DONE]"));
    });
    let events = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
