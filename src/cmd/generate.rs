//! `posenc generate` (also spelled `posenc lm generate`): continue a prompt with any causal
//! language model; and `posenc convert`: a GGUF model as a Hugging Face directory.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use posenc_llama::chat::Message;
use posenc_lm::sample::{generate_observed, Window};
use posenc_lm::text::{StopTexts, TextStream};
use posenc_transformer::lm;
use posenc_transformer::Streaming;

use super::model::{CausalLm, ModelArgs};
use super::{read_prompt, SamplingArgs};

/// `posenc generate` and `posenc lm generate`: one command, two spellings, differing only
/// in the default model.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Lay the prompt out as a user's message with the model's chat template, and print
    /// the answer only.
    #[arg(long)]
    chat: bool,
    /// The most tokens to generate (it stops earlier at an end-of-sequence token, or a
    /// --stop text).
    #[arg(long, short = 'n', visible_alias = "n-predict", default_value_t = 200)]
    max_tokens: usize,
    /// Stop once the generated text holds this text (printed with it); repeat for several
    /// (llama.cpp's --reverse-prompt) [default: none, only end-of-sequence and
    /// --max-tokens stop].
    #[arg(long, short = 'r', visible_alias = "reverse-prompt")]
    stop: Vec<String>,
    /// Draw each token from the last N tokens only, as nanoGPT crops at its block size
    /// [default: a learned table's length, past which there are no positions; no cropping
    /// for encodings that take any position: they run past their trained context, for
    /// better or worse, which `lm eval` measures].
    #[arg(long, short = 'c', visible_alias = "ctx-size")]
    window: Option<usize>,
    /// With --window, roll the key/value cache instead of reading the window again: keep
    /// the first N tokens (attention sinks) and the most recent ones, each at its place
    /// within the cache, so every token costs one position and memory stays flat however
    /// long the generation (StreamingLLM, Xiao et al. 2024); 0 rolls with no sinks
    /// [default: off, the window is read again from position 0 for each token].
    #[arg(long, requires = "window")]
    sinks: Option<usize>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Prompt tokens read per pass through the model: fewer, larger passes over a long
    /// prompt, at memory that grows with the chunk (llama.cpp's --ubatch-size).
    #[arg(long, default_value_t = lm::PREFILL_CHUNK)]
    prompt_chunk: usize,
    /// Chat turn by turn: read a message a line, answer it with the conversation so far,
    /// until the end of input or `/exit` (the default with --chat and no prompt when
    /// standard input is a terminal).
    #[arg(long, requires = "chat", conflicts_with = "prompt")]
    interactive: bool,
    /// Output format: text (streamed as it is generated) or json (at the end, alone on
    /// standard output: the model, the prompt and the generated text).
    #[arg(long, value_enum, default_value_t = super::Format::Text, conflicts_with = "interactive")]
    format: super::Format,
    /// Refuse a prompt (with the answer's tokens) longer than the context the model was
    /// trained on, when nothing stretches or crops it; by default it is a warning.
    #[arg(long)]
    strict_context: bool,
    /// After the text, print to standard error how long loading, reading the prompt and
    /// each generated token took.
    #[arg(long)]
    timing: bool,
    /// Read the prompt from this file, as it is (llama.cpp's -f) [default: none, the prompt
    /// given or standard input].
    #[arg(long, short = 'f', conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// The text to continue [default: --file, else standard input, its final line end
    /// dropped].
    prompt: Option<String>,
}

/// Why a generation stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Stop {
    /// The model drew its end-of-sequence token.
    EndOfSequence,
    /// `--max-tokens` were drawn.
    MaxTokens,
    /// The text came to hold a `--stop` text.
    #[serde(rename = "stop_text")]
    Text(String),
}

/// A continuation: its text, its tokens drawn and why it stopped.
struct Answer {
    text: String,
    tokens: usize,
    stop: Stop,
}

impl GenerateArgs {
    /// Loads the model (`--model`, or `default`) and streams the generated text to `out`
    /// as it is produced.
    pub fn run(self, default: &str, out: &mut impl Write) -> Result<()> {
        // Settings first: nothing is loaded or printed for a bad flag.
        let sampling: posenc_lm::sample::Sampling = self.sampling.into();
        sampling.validate()?;
        posenc::limits::check("tokens", self.max_tokens, posenc::limits::MAX_POSITIONS)?;
        let chunk = self.prompt_chunk;
        posenc::limits::check_positive("the prompt chunk", chunk, lm::MAX_PREFILL_CHUNK)?;
        if let (Some(window), Some(sinks)) = (self.window, self.sinks) {
            Streaming::new(sinks, window)?;
        }
        // The model before the prompt: a model that does not load is named without waiting
        // on standard input.
        let loading = std::time::Instant::now();
        let mut lm = self.model.load(default)?;
        lm.model.read_prompts_by(chunk)?;
        let loaded = loading.elapsed();
        let interactive = self.interactive
            || (self.chat
                && self.prompt.is_none()
                && std::io::IsTerminal::is_terminal(&std::io::stdin()));
        if interactive {
            return self.converse(&lm, default, sampling, out);
        }
        let prompt = match &self.file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("reading the prompt from {}", path.display()))?,
            None => read_prompt(self.prompt.clone())?,
        };
        anyhow::ensure!(
            !prompt.is_empty(),
            "the prompt is empty: give at least one character"
        );
        // A plain prompt is printed before its continuation, once generation has started
        // (a prompt refused by the generator prints nothing).
        let (text, mut echo) = if self.chat {
            let template = lm.chat.as_ref().with_context(|| {
                format!(
                    "the model `{}` has no chat template",
                    self.model.spec(default)
                )
            })?;
            (template.render(&[Message::user(&prompt)], true)?, None)
        } else {
            (prompt.clone(), Some(prompt))
        };
        let ids = lm.encode_prompt(&text)?;
        let mut clock = Timing::start(loaded);
        if self.format == super::Format::Json {
            // Generated into memory, then printed whole as one JSON object.
            let answer = self.answer(&lm, &ids, sampling, &mut std::io::sink(), |_| {
                clock.token();
                Ok(())
            })?;
            // The sampling settings as the sampler read them, and the run's own.
            let mut settings = serde_json::to_value(sampling)?;
            for (key, value) in [
                ("max_tokens", serde_json::json!(self.max_tokens)),
                ("stop", serde_json::json!(self.stop)),
                ("window", serde_json::json!(self.window)),
                ("sinks", serde_json::json!(self.sinks)),
                ("chat", serde_json::json!(self.chat)),
            ] {
                settings[key] = value;
            }
            let record = serde_json::json!({
                "model": self.model.spec(default),
                "prompt": prompt_of(echo.as_deref(), &text),
                "prompt_tokens": ids.len(),
                "text": answer.text,
                "generated_tokens": answer.tokens,
                "stop": answer.stop,
                "settings": settings,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&record)?)?;
            if self.timing {
                posenc_train::log(&clock.report(ids.len()));
            }
            return Ok(());
        }
        self.answer(&lm, &ids, sampling, out, |out| {
            clock.token();
            match echo.take() {
                Some(prompt) => out.write_all(prompt.as_bytes()),
                None => Ok(()),
            }
        })?;
        if let Some(prompt) = echo {
            out.write_all(prompt.as_bytes())?;
        }
        writeln!(out)?;
        if self.timing {
            // The text first: standard output is buffered, standard error is not.
            out.flush()?;
            posenc_train::log(&clock.report(ids.len()));
        }
        Ok(())
    }
}

impl GenerateArgs {
    /// Generates the continuation of `ids` (after the context check), streaming its text
    /// to `out` and returning it; `each` runs at every token first, before any text of it.
    fn answer<W: Write>(
        &self,
        lm: &CausalLm,
        ids: &[u32],
        sampling: posenc_lm::sample::Sampling,
        out: &mut W,
        mut each: impl FnMut(&mut W) -> std::io::Result<()>,
    ) -> Result<Answer> {
        let window = match (self.window.or(lm.model.max_positions()), self.sinks) {
            (Some(window), Some(sinks)) => Some(Window::Roll(Streaming::new(sinks, window)?)),
            (window, _) => window.map(Window::Crop),
        };
        if window.is_none() && self.model.rope_scaling().is_none() {
            super::model::check_context(
                lm,
                "the prompt and the answer come to",
                ids.len() + self.max_tokens,
                Some(self.strict_context),
            )?;
        }
        let mut stream = TextStream::default();
        let stops = StopTexts::new(self.stop.iter().cloned());
        let mut text = String::new();
        let (mut tokens, mut stop) = (0, Stop::MaxTokens);
        generate_observed(
            &lm.model,
            ids,
            self.max_tokens,
            sampling,
            window,
            |_| {},
            |token| {
                each(out)?;
                tokens += 1;
                if Some(token) == lm.eos {
                    stop = Stop::EndOfSequence;
                    return Ok(false);
                }
                let piece = stream
                    .push(lm, token)
                    .map_err(posenc_train::Error::callback)?;
                out.write_all(piece.as_bytes())?;
                out.flush()?;
                text += &piece;
                if let Some((_, found)) = stops.find(&text, piece.len()) {
                    stop = Stop::Text(found.to_string());
                    return Ok(false);
                }
                Ok(true)
            },
        )?;
        Ok(Answer { text, tokens, stop })
    }

    /// The conversation: a user's line, the model's answer streamed, turn after turn, each
    /// answer given the whole conversation before it.
    fn converse(
        &self,
        lm: &CausalLm,
        default: &str,
        sampling: posenc_lm::sample::Sampling,
        out: &mut impl Write,
    ) -> Result<()> {
        use std::io::BufRead;
        let template = lm.chat.as_ref().with_context(|| {
            format!(
                "the model `{}` has no chat template",
                self.model.spec(default)
            )
        })?;
        let mut messages: Vec<Message> = Vec::new();
        let mut lines = std::io::stdin().lock().lines();
        loop {
            eprint!("> ");
            let Some(line) = lines.next() else {
                break;
            };
            let line = line.context("reading standard input")?;
            let line = line.trim();
            if line == "/exit" || line == "/quit" {
                break;
            }
            if line.is_empty() {
                continue;
            }
            messages.push(Message::user(line));
            let ids = lm.encode_prompt(&template.render(&messages, true)?)?;
            let answer = self.answer(lm, &ids, sampling, out, |_| Ok(()))?.text;
            writeln!(out)?;
            out.flush()?;
            messages.push(Message {
                role: "assistant".into(),
                content: answer,
            });
        }
        Ok(())
    }
}

/// The prompt as the user gave it: the plain prompt, or the rendered chat text.
fn prompt_of(plain: Option<&str>, rendered: &str) -> String {
    plain.unwrap_or(rendered).to_string()
}

/// When a generation's tokens came, for `--timing`.
struct Timing {
    loaded: std::time::Duration,
    start: std::time::Instant,
    /// When the first token was drawn (the prompt read), and the last.
    first: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
    tokens: usize,
}

impl Timing {
    fn start(loaded: std::time::Duration) -> Self {
        Self {
            loaded,
            start: std::time::Instant::now(),
            first: None,
            last: None,
            tokens: 0,
        }
    }

    /// A token was drawn: its logits are on the host, so the device has finished it.
    fn token(&mut self) {
        let now = std::time::Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.tokens += 1;
    }

    /// One line: load time, prompt tokens/s (up to the first token), generated tokens/s
    /// (each token after the first).
    fn report(&self, prompt: usize) -> String {
        let mut line = format!("loaded in {:.2} s", self.loaded.as_secs_f64());
        if let (Some(first), Some(last)) = (self.first, self.last) {
            let read = (first - self.start).as_secs_f64();
            line += &format!(
                "; prompt of {prompt} tokens read in {read:.3} s ({:.0} tokens/s)",
                prompt as f64 / read
            );
            if self.tokens > 1 {
                let gen = (last - first).as_secs_f64();
                line += &format!(
                    "; {} more tokens in {gen:.3} s ({:.1} tokens/s)",
                    self.tokens - 1,
                    (self.tokens - 1) as f64 / gen
                );
            }
        }
        line
    }
}

/// `posenc convert`
#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The GGUF file, or `smollm2`.
    #[arg(long)]
    model: String,
    /// The directory to write (it must not hold a model yet).
    #[arg(long)]
    out: PathBuf,
}

impl ConvertArgs {
    /// Converts, then says where the files are.
    pub fn run(self, out: &mut impl Write) -> Result<()> {
        let path = match self.model.as_str() {
            "smollm2" => posenc_llama::model::fetched_smollm2()?,
            path => PathBuf::from(path),
        };
        posenc_llama::convert::convert(&path, &self.out)?;
        writeln!(
            out,
            "wrote {} (model.safetensors, config.json, tokenizer.json, tokenizer_config.json)",
            self.out.display()
        )?;
        Ok(())
    }
}
