//! What `encoding list` says of each kind's settings ([`EncodingConfig::settings_of`]) is
//! what the kind reads: the names serde itself lists for a misspelt one, each default the
//! value a config that leaves the setting out gets, and each named value accepted.

use posenc::EncodingConfig;

/// The fields serde's own error names for an unknown one: "expected one of `a`, `b`", or
/// none ("there are no fields").
fn fields_serde_names(kind: &str) -> Vec<String> {
    let typo = format!(r#"{{"kind": "{kind}", "no_such_setting": 1}}"#);
    let message = typo.parse::<EncodingConfig>().unwrap_err().to_string();
    assert!(message.contains("no_such_setting"), "{kind}: {message}");
    let Some((_, listed)) = message.split_once("expected") else {
        return vec![];
    };
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_kind_lists_the_settings_it_reads_with_true_defaults() {
    let mut described = 0;
    for kind in EncodingConfig::kinds() {
        let settings = EncodingConfig::settings_of(kind).unwrap();
        let mut listed: Vec<String> = settings.iter().map(|s| s.name.clone()).collect();
        let mut read = fields_serde_names(kind);
        listed.sort();
        read.sort();
        assert_eq!(listed, read, "`{kind}`: listed against read");
        let bare = EncodingConfig::from_kind(kind).unwrap();
        for setting in &settings {
            let name = &setting.name;
            assert!(
                setting.description.len() > 10 && !setting.description.contains("[`"),
                "`{kind}.{name}`: {:?}",
                setting.description
            );
            described += 1;
            // Written out at its default, the setting changes nothing.
            let given = bare.with_setting(name, setting.default.clone()).unwrap();
            assert_eq!(given, bare, "`{kind}.{name}` at {}", setting.default);
            for value in &setting.values {
                let chosen = bare.with_setting(name, value.clone());
                assert!(chosen.is_ok(), "`{kind}.{name}` = {value}: {chosen:?}");
            }
        }
    }
    assert!(described >= 40, "{described} settings described");
}

#[test]
fn the_settings_that_only_a_typo_named_are_listed() {
    let rope = EncodingConfig::settings_of("rope").unwrap();
    let of = |name: &str| rope.iter().find(|s| s.name == name).unwrap();
    assert_eq!(of("position_scale").default, serde_json::json!(1.0));
    assert!(of("position_scale").description.contains("interpolation"));
    assert_eq!(of("scaling").default, serde_json::Value::Null);
    assert_eq!(
        of("layout").values,
        [
            serde_json::json!("halves"),
            serde_json::json!("interleaved")
        ]
    );
    let unknown = EncodingConfig::settings_of("warp-drive").unwrap_err();
    assert!(unknown.to_string().contains("warp-drive"), "{unknown}");
}
