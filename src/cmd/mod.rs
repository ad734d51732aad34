//! One module per subcommand.

pub mod encoding;
