//! A model's chat template: the Jinja program (from the GGUF's `tokenizer.chat_template` or
//! Hugging Face's `tokenizer_config.json`) that lays out a conversation as the prompt the
//! model was tuned on, rendered with `minijinja`.

use crate::error::Result;
use minijinja::{context, Environment, Error, ErrorKind};
use posenc_error::invalid;
use serde::Serialize;

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A user's message.
    pub fn user(content: &str) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl ChatTemplate {
    /// Compiles `source`.
    ///
    /// # Errors
    /// A template that is not valid Jinja, with minijinja's reason.
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        // Hugging Face's templates call this to refuse a conversation.
        env.add_function("raise_exception", |msg: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| invalid!("the chat template does not compile: {e}"))?;
        Ok(Self { env })
    }

    /// The prompt for `messages`, ending with the assistant's turn opened when
    /// `add_generation_prompt`.
    ///
    /// # Errors
    /// A template that fails on these messages.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| invalid!("the chat template is missing: {e}"))?;
        Ok(template
            .render(context! { messages, add_generation_prompt })
            .map_err(|e| invalid!("the chat template failed: {e}"))?)
    }
}
