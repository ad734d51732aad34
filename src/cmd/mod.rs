//! One module per subcommand.

pub mod bench;
pub mod encoding;
pub mod translate;
