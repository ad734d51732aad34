//! One module per subcommand.

pub mod bench;
pub mod embed;
pub mod encoding;
pub mod translate;
