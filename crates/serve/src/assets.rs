//! The page: static files embedded in the binary, so `posenc serve` works offline from one
//! file with no build step.

/// A file of the page: its name under `/assets/`, its media type and its bytes.
pub struct Asset {
    /// Its name (`app.js`).
    pub name: &'static str,
    /// Its media type.
    pub media_type: &'static str,
    /// Its contents.
    pub bytes: &'static [u8],
}

/// The page itself, served at `/`.
pub const INDEX: &str = include_str!("../assets/index.html");

/// Every file under `/assets/`: the page's script, style and icon, and Apache ECharts (vendored
/// by `scripts/vendor_echarts.sh`) with its licence.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "style.css",
        media_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/style.css"),
    },
    Asset {
        name: "favicon.svg",
        media_type: "image/svg+xml",
        bytes: include_bytes!("../assets/favicon.svg"),
    },
    Asset {
        name: "echarts.min.js",
        media_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/echarts.min.js"),
    },
    Asset {
        name: "LICENSE-echarts",
        media_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/LICENSE-echarts"),
    },
];

/// The asset called `name`, if there is one.
pub fn get(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}
