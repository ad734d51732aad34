//! Every positional encoding side by side: the properties the documents ask for.
//!
//! ```sh
//! cargo run --release --example encoding_properties
//! ```

use candle_core::Device;
use posenc::analysis::{analyze, Setting};
use posenc::EncodingConfig;

fn main() -> anyhow::Result<()> {
    let setting = Setting {
        d_model: 32,
        heads: 4,
        len: 64,
        shift: 3,
    };
    let show = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1e}"));
    println!(
        "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "kind", "unique", "max |v|", "drift", "shift fit", "relative", "symmetry"
    );
    for kind in EncodingConfig::kinds() {
        let enc = EncodingConfig::from_kind(kind)?.build_untrained(
            setting.d_model,
            setting.heads,
            &Device::Cpu,
        )?;
        let p = analyze(&*enc, setting)?;
        println!(
            "{:<18} {:>10} {:>10.1e} {:>10.1e} {:>10} {:>10.1e} {:>10.1e}",
            kind,
            show(p.uniqueness),
            p.max_abs,
            p.length_drift,
            show(p.shift_residual),
            p.relative_residual,
            p.symmetry_residual
        );
    }
    Ok(())
}
