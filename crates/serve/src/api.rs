//! The JSON API, and the routes of the page.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the page |
//! | `GET /assets/{name}` | its script, style and ECharts |
//! | `GET /api/kinds` | every registered encoding kind, its settings at their defaults |
//! | `POST /api/encoding` | one encoding's views ([`crate::encodings::EncodingRequest`]) |
//! | `GET /api/models` | the translators (the shipped one's state) and the language models |
//! | `POST /api/translate` | a translation with its attention ([`crate::models::TranslateRequest`]) |
//! | `GET /api/generate?model=…&prompt=…` | a generation, streamed as server-sent events |
//! | `GET /api/records` | every records file under the directories given, named by its study |
//! | `GET /api/columns?path=…` | a records file's columns, and the length its models were trained to |
//! | `POST /api/aggregate` | its values by group and x, mean and spread ([`crate::records::AggregateRequest`]) |
//! | `GET /v1/models` | the language models, in OpenAI's format ([`crate::openai`]) |
//! | `POST /v1/chat/completions` | a chat completion in OpenAI's format, whole or streamed ([`crate::openai::ChatRequest`]) |
//!
//! Every error is JSON `{"error": "…"}` with a 4xx status for the request's fault: 400
//! for malformed input (the command line's own message), 403 for a path outside the
//! directories given, 404 for what does not exist, 413 for a body over [`MAX_BODY_BYTES`];
//! and 503 (with `Retry-After: 1`) when every worker is busy or a generation is running.
//!
//! A generation's events are `prompt` (`{"tokens": [...]}`), then one `token` per token
//! ([`crate::models::Token`], its attention every `attention_every` tokens), then `done`
//! ([`crate::models::Done`]: the tokens, why it stopped, the settings), or `error`
//! (`{"error": "…"}`). Closing the
//! stream stops the generation and frees the server for the next.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::error::ApiError;
use crate::{encodings, models, openai, records};

use crate::app::body;
pub use crate::app::{App, MAX_BODY_BYTES};

type Shared = State<Arc<App>>;

/// The routes over `app`.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{name}", get(asset))
        .route("/api/kinds", get(kinds))
        .route("/api/encoding", post(encoding))
        .route("/api/models", get(list_models))
        .route("/api/translate", post(translate))
        .route("/api/generate", get(generate))
        .route("/api/records", get(list_records))
        .route("/api/columns", get(columns))
        .route("/api/aggregate", post(aggregate))
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .fallback(|| async { ApiError::not_found("no such page or endpoint") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(app))
}

async fn index() -> Html<&'static str> {
    Html(crate::assets::INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match crate::assets::get(&name) {
        Some(a) => ([(header::CONTENT_TYPE, a.media_type)], a.bytes).into_response(),
        None => ApiError::not_found(format!("no asset `{name}`")).into_response(),
    }
}

async fn kinds() -> Json<Vec<serde_json::Value>> {
    Json(encodings::kinds())
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
}

/// Runs `work` on a blocking thread if a worker is free, else answers 503.
async fn on_worker<T: Send + 'static>(
    app: &App,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = app
        .workers
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::busy("every worker is busy; try again in a moment"))?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work()
    })
    .await
    .map_err(|e| ApiError::internal(format!("the worker failed: {e}")))?
}

async fn encoding(
    State(app): Shared,
    request: Result<Json<encodings::EncodingRequest>, JsonRejection>,
) -> Result<Json<encodings::EncodingView>, ApiError> {
    let request = body(request)?;
    on_worker(&app, move || encodings::view(&request))
        .await
        .map(Json)
}

async fn list_models(State(app): Shared) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "translation_error": app.models.translator(None).map(|_| ()).err().map(|e| e.message),
        "translators": app.models.translators(),
        "lms": app.models.lms(),
    }))
}

async fn translate(
    State(app): Shared,
    request: Result<Json<models::TranslateRequest>, JsonRejection>,
) -> Result<Json<models::Translation>, ApiError> {
    let request = body(request)?;
    let shared = app.clone();
    on_worker(&app, move || models::translate(&shared.models, &request))
        .await
        .map(Json)
}

async fn generate(
    State(app): Shared,
    request: Result<Query<models::GenerateRequest>, QueryRejection>,
) -> Result<Sse<impl tokio_stream::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let request = query(request)?;
    models::check(&request)?;
    let permit = app.generation_permit()?;
    let shared = app.clone();
    let name = request.model.clone();
    let (lm, ids, texts) = {
        let request = request.clone();
        tokio::task::spawn_blocking(move || {
            let lm = shared.models.lm(&name)?;
            let (ids, texts) = models::prompt(&lm, &request)?;
            Ok::<_, ApiError>((lm, ids, texts))
        })
        .await
        .map_err(|e| ApiError::internal(format!("loading the model failed: {e}")))??
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(8);
    let json =
        |name: &str, value: serde_json::Value| Event::default().event(name).data(value.to_string());
    // Room for it: the channel is new.
    let _ = tx.try_send(json("prompt", serde_json::json!({ "tokens": texts })));
    tokio::task::spawn_blocking(move || {
        // Held until the generation ends: a page that closes its stream ends it at the
        // next token, since `send` then fails.
        let tokens = tx.clone();
        let outcome = models::generate(&lm, &ids, &request, move |token| {
            let value = serde_json::to_value(&token).unwrap_or_default();
            tokens.blocking_send(json("token", value)).is_ok()
        });
        // Freed before the last event: a client that has read `done` finds the server free.
        drop(permit);
        let last = match outcome {
            Ok(done) => json("done", serde_json::to_value(&done).unwrap_or_default()),
            Err(e) => json("error", serde_json::json!({ "error": e.message })),
        };
        let _ = tx.blocking_send(last);
    });
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::default()))
}

async fn list_records(State(app): Shared) -> Json<Vec<records::Listed>> {
    let roots = app.roots.clone();
    Json(
        tokio::task::spawn_blocking(move || records::list(&roots))
            .await
            .unwrap_or_default(),
    )
}

/// `?path=…`: a records file, as listed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathQuery {
    path: String,
}

async fn columns(
    State(app): Shared,
    request: Result<Query<PathQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let PathQuery { path } = query(request)?;
    let shared = app.clone();
    on_worker(&app, move || {
        let file = records::resolve(&shared.roots, &path)?;
        let rows = records::read(&file, &path)?;
        Ok(serde_json::json!({
            "path": path,
            "rows": rows.len(),
            "columns": records::columns(&rows),
            "trained_length": records::trained_length(&rows),
        }))
    })
    .await
    .map(Json)
}

async fn aggregate(
    State(app): Shared,
    request: Result<Json<records::AggregateRequest>, JsonRejection>,
) -> Result<Json<Vec<records::Series>>, ApiError> {
    let request = body(request)?;
    let shared = app.clone();
    on_worker(&app, move || {
        let file = records::resolve(&shared.roots, &request.path)?;
        let rows = records::read(&file, &request.path)?;
        records::aggregate(&rows, &request)
    })
    .await
    .map(Json)
}
