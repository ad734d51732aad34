//! What every handler shares: the server's state ([`App`]) and the body extractor whose
//! rejection is our error.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::Json;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::{models, records, Options};

/// The largest request body: 64 KiB (an encoding's settings are a few hundred bytes).
pub const MAX_BODY_BYTES: usize = 64 << 10;

/// What every handler shares.
pub struct App {
    pub(crate) roots: Vec<records::Root>,
    pub(crate) models: models::Models,
    /// Requests computed at once; more are told 503.
    pub(crate) workers: Arc<Semaphore>,
    /// One generation at a time; a second is told 503 until the first ends or is closed.
    pub(crate) generation: Arc<Semaphore>,
}

impl App {
    /// The state for `options`.
    ///
    /// # Errors
    /// A records or runs directory that does not exist.
    pub fn new(options: &Options) -> crate::Result<Self> {
        let dirs: Vec<_> = options
            .records
            .iter()
            .chain(&options.runs)
            .cloned()
            .collect();
        Ok(Self {
            roots: records::roots(&dirs).map_err(crate::Error::Setup)?,
            models: models::Models::new(options.kotoba.clone(), options.lm.clone(), &options.runs),
            workers: Arc::new(Semaphore::new(options.workers.max(1))),
            generation: Arc::new(Semaphore::new(1)),
        })
    }

    /// The one generation's permit, or 503 while another runs.
    pub(crate) fn generation_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.generation
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::busy("a generation is running: wait for it to end, or stop it"))
    }
}

/// A JSON body, or the extractor's rejection as our error: 413 past the limit, 400 with
/// serde's message (which names the field) otherwise.
pub(crate) fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    match body {
        Ok(Json(value)) => Ok(value),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is over the {MAX_BODY_BYTES} bytes allowed"),
        }),
        Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
    }
}
