//! What the API answers when a request cannot be served: a status and a message naming the
//! cause, as JSON `{"error": "…"}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A request the server refuses or could not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status: 4xx for the request's fault, 503 when busy, 500 for ours.
    pub status: StatusCode,
    /// What went wrong, in the words the command line would use.
    pub message: String,
}

impl ApiError {
    /// 400: the request is malformed or names something that does not exist.
    pub fn bad_request(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 403: a path outside the directories the server was given.
    pub fn forbidden(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    /// 404: no such file or model.
    pub fn not_found(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 503: every worker for this kind of request is busy; try again shortly.
    pub fn busy(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// 500: the server failed (a worker panicked or was stopped).
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn new(status: StatusCode, message: impl std::fmt::Display) -> Self {
        Self {
            status,
            message: message.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (in use, or not this machine's).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The runtime or a directory given could not be set up.
    #[error("{0}")]
    Setup(String),
}

/// A result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
