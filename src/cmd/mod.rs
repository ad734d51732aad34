//! One module per subcommand.

pub mod bench;
pub mod embed;
pub mod encoding;
pub mod experiment;
pub mod plot;
pub mod translate;

/// The sentences given as arguments, or with none, one per line from standard input.
pub fn sentences_or_stdin(args: Vec<String>) -> std::io::Result<Vec<String>> {
    use std::io::BufRead;
    if args.is_empty() {
        std::io::stdin().lock().lines().collect()
    } else {
        Ok(args)
    }
}
