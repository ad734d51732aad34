//! Passkey retrieval: prompts of the asked length with the key where it was asked, keys
//! that depend only on the seed and the cell, an answer read as its first number, and a
//! run whose records follow the model's answers.

use posenc::EncodingConfig;
use posenc_lm::passkey::{
    self, accuracy, first_number, needle, prompt, PasskeyConfig, PasskeyRecord, Subject, FILLER,
    INTRO, QUESTION,
};
use posenc_train::Result;

/// One token per byte.
fn bytes(text: &str) -> Result<Vec<u32>> {
    Ok(text.bytes().map(u32::from).collect())
}

fn text(ids: &[u32]) -> String {
    ids.iter().map(|&b| char::from(b as u8)).collect()
}

#[test]
fn a_prompt_has_its_length_and_its_key_at_its_depth() {
    let fixed = INTRO.len() + needle("12345").len() + QUESTION.len();
    for length in [fixed + FILLER.len(), 1000, 4321] {
        for depth in [0.0, 0.25, 0.5, 1.0] {
            let p = prompt(&bytes, length, depth, "12345").unwrap();
            // As long as whole fillers reach, never longer.
            assert!(p.ids.len() <= length && p.ids.len() + FILLER.len() > length);
            let s = text(&p.ids);
            assert!(s.starts_with(INTRO) && s.ends_with(QUESTION), "{s}");
            assert_eq!(s.matches("12345").count(), 2);
            assert!(s[p.needle_at..].starts_with(&needle("12345")));
            // The fillers before the key are the depth's share of all of them.
            let n = (length - fixed) / FILLER.len();
            let before = (p.needle_at - INTRO.len()) / FILLER.len();
            assert_eq!(
                before,
                (depth * n as f64).round() as usize,
                "{length} {depth}"
            );
        }
    }
    let e = prompt(&bytes, fixed, 0.5, "12345").unwrap_err().to_string();
    assert!(
        e.contains("too short") && e.contains(&(fixed + FILLER.len()).to_string()),
        "{e}"
    );
}

#[test]
fn keys_depend_on_the_seed_and_the_cell_only() {
    let cfg = PasskeyConfig {
        lengths: vec![1000],
        depths: vec![0.5],
        trials: 3,
        seed: 7,
    };
    let keys: Vec<String> = (0..50).map(|t| cfg.key(1000, 0.5, t)).collect();
    assert!(keys
        .iter()
        .all(|k| k.len() == 5 && k.bytes().all(|b| b.is_ascii_digit())));
    assert_eq!(keys[0], cfg.key(1000, 0.5, 0));
    // Equal depths draw equal keys, -0 and 0 too.
    assert_eq!(cfg.key(1000, 0.0, 0), cfg.key(1000, -0.0, 0));
    let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
    assert!(distinct.len() > 45, "{keys:?}");
    assert_ne!(cfg.key(1000, 0.5, 0), cfg.key(1000, 0.9, 0));
    assert_ne!(cfg.key(1000, 0.5, 0), cfg.key(2000, 0.5, 0));
    let other = PasskeyConfig { seed: 8, ..cfg };
    assert_ne!(keys[0], other.key(1000, 0.5, 0));
}

#[test]
fn an_answer_is_its_first_number() {
    assert_eq!(first_number(" 71432. Remember it."), Some("71432"));
    assert_eq!(first_number("is 714 32"), Some("714"));
    assert_eq!(first_number(" the grass"), None);
}

#[test]
fn bad_settings_are_named() {
    let ok = PasskeyConfig {
        lengths: vec![500],
        depths: vec![0.5],
        trials: 1,
        seed: 0,
    };
    ok.validate().unwrap();
    for (bad, word) in [
        (
            PasskeyConfig {
                depths: vec![1.5],
                ..ok.clone()
            },
            "depth",
        ),
        (
            PasskeyConfig {
                depths: vec![f64::NAN],
                ..ok.clone()
            },
            "depth",
        ),
        (
            PasskeyConfig {
                trials: 0,
                ..ok.clone()
            },
            "trial",
        ),
        (
            PasskeyConfig {
                lengths: vec![],
                ..ok.clone()
            },
            "length",
        ),
        (
            PasskeyConfig {
                lengths: vec![usize::MAX],
                ..ok.clone()
            },
            "length",
        ),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(word), "{e}");
    }
}

/// A model over bytes (256 tokens), untrained: what it writes is whatever it writes, and
/// the records must say so.
fn byte_model() -> posenc_transformer::LanguageModel {
    use candle_core::{DType, Device};
    use candle_nn::{VarBuilder, VarMap};
    let cfg = posenc_transformer::LmConfig {
        vocab_size: 256,
        d_model: 16,
        heads: 2,
        d_ff: 32,
        layers: 1,
        encoding: EncodingConfig::from_kind("rope").unwrap(),
        context: 64,
        ..Default::default()
    };
    let varmap = VarMap::new();
    posenc_transformer::LanguageModel::new(
        &cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    posenc_train::init::initialize(&varmap, 3).unwrap();
    posenc_transformer::LanguageModel::frozen(&cfg, &varmap, &Device::Cpu).unwrap()
}

#[test]
fn a_run_records_every_trial_as_the_model_answered_it() {
    let model = byte_model();
    let decode = |ids: &[u32]| Ok(text(ids));
    let subject = Subject {
        model: &model,
        encode: &bytes,
        decode: &decode,
        eos: None,
    };
    let cfg = PasskeyConfig {
        lengths: vec![400, 700],
        depths: vec![0.0, 1.0],
        trials: 2,
        seed: 1,
    };
    let (mut read, mut seen) = (0, 0);
    let records = passkey::run(
        &subject,
        &cfg,
        |n| read += n,
        |_| {
            seen += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!((records.len(), seen), (8, 8));
    assert_eq!(read, records.iter().map(|r| r.tokens).sum::<usize>());
    for r in &records {
        assert_eq!(r.key, cfg.key(r.length, r.depth, r.trial));
        assert_eq!(r.seed, cfg.seed);
        assert!(r.tokens <= r.length && r.tokens > r.length - FILLER.len());
        assert_eq!(r.answer.chars().count(), passkey::ANSWER_TOKENS);
        assert_eq!(r.correct, first_number(&r.answer) == Some(r.key.as_str()));
        // The answer is the model's greedy continuation of the prompt.
        let p = prompt(&bytes, r.length, r.depth, &r.key).unwrap();
        let greedy = posenc_lm::sample::generate(
            &model,
            &p.ids,
            passkey::ANSWER_TOKENS,
            posenc_lm::sample::Sampling::greedy(),
        )
        .unwrap();
        assert_eq!(r.answer, text(&greedy));
    }
    // Accuracy is the share of correct trials per cell; here recomputed with made-up marks.
    let marked: Vec<PasskeyRecord> = records
        .iter()
        .map(|r| PasskeyRecord {
            correct: r.trial == 0 || r.length == 700,
            ..r.clone()
        })
        .collect();
    assert_eq!(
        accuracy(&cfg, &marked),
        vec![vec![0.5, 0.5], vec![1.0, 1.0]]
    );
    // An absurd length is refused before any trial runs.
    let huge = PasskeyConfig {
        lengths: vec![400, 1 << 40],
        ..cfg
    };
    let mut ran = 0;
    let e = passkey::run(
        &subject,
        &huge,
        |_| {},
        |_| {
            ran += 1;
            Ok(())
        },
    )
    .unwrap_err();
    assert_eq!(ran, 0);
    assert!(format!("{e:#}").contains("length"), "{e:#}");
}

/// The peak resident memory reads this process's `VmHWM` in MB: at least a buffer just
/// touched and still held (other tests in this process may reset the peak, never below
/// what is held), far below a terabyte (the kB of the file are converted), and a status
/// file that is not there reads as nothing. (Linux only.)
#[cfg(target_os = "linux")]
#[test]
fn peak_memory_is_read_from_the_status_file() {
    use posenc_train::memory::{peak_rss_mb, peak_rss_mb_in};
    // 64 MB, every page written.
    let buffer = vec![1u8; 64 << 20];
    let after = peak_rss_mb().expect("Linux reports VmHWM");
    assert!((64.0..1e6).contains(&after), "{after} MB");
    assert_eq!(buffer.iter().map(|&b| b as usize).sum::<usize>(), 64 << 20);
    let gone = std::path::Path::new("/proc/this-process-does-not-exist/status");
    assert_eq!(peak_rss_mb_in(gone), None);
}
