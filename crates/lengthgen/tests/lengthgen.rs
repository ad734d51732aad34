//! The algorithmic problems, the exact-match measure, and lengthgen runs through the one
//! training loop.

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use posenc_lengthgen::experiment::{self, LengthgenExperimentConfig};
use posenc_lengthgen::problems::{is_held_out, render, Instance, Problem, DIGIT, EOS, HINT, HINTS};
use posenc_lengthgen::task::{
    self as lengthgen, score, test_instances, Lengthgen, LengthgenConfig,
};
use posenc_train::fit::RunOptions;
use posenc_train::job;
use posenc_train::labelled::{check_unique, parse_list, Labelled};
use posenc_transformer::LanguageModel;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const QUIET: RunOptions = RunOptions {
    quiet: true,
    force: false,
    stop_after: None,
    log_dir: None,
};

/// The digits of a token sequence as a number, least significant first.
fn number(lsb_first: &[u32]) -> u128 {
    lsb_first
        .iter()
        .rev()
        .fold(0, |acc, &t| acc * 10 + u128::from(t - DIGIT))
}

#[test]
fn every_answer_is_the_direct_computation() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for n in [1, 2, 5, 17] {
        for _ in 0..50 {
            // The prompt as text, and each answer computed from the text by other means.
            let copy = Problem::Copy.random(n, &mut rng);
            let text = render(&copy.prompt);
            assert_eq!(text.len(), n);
            assert_eq!(render(&copy.answer), text);

            let rev = Problem::Reverse.random(n, &mut rng);
            let want: String = render(&rev.prompt).chars().rev().collect();
            assert_eq!(render(&rev.answer), want);

            let sort = Problem::Sort.random(n, &mut rng);
            let text = render(&sort.prompt);
            let counts: Vec<usize> = ('0'..='9')
                .map(|d| text.chars().filter(|&c| c == d).count())
                .collect();
            let want: String = ('0'..='9')
                .zip(&counts)
                .map(|(d, &k)| d.to_string().repeat(k))
                .collect();
            assert_eq!(render(&sort.answer), want);

            let dup = Problem::Duplicate.random(n, &mut rng);
            let text = render(&dup.prompt);
            assert_eq!(render(&dup.answer), format!("{text}{text}"));

            let add = Problem::Addition.random(n, &mut rng);
            let text = render(&add.prompt);
            let (a, b) = text.split_once('+').unwrap();
            assert_eq!((a.len(), b.len()), (n, n), "{text}");
            let (a, b) = (&add.prompt[..n], &add.prompt[n + 1..]);
            assert_eq!(add.answer.len(), n + 1);
            assert_eq!(number(&add.answer), number(a) + number(b), "{text}");

            // Mixed: one number of n digits, the other of 1 to n, either first; the sum
            // in n + 1 digits.
            let mixed = Problem::AdditionMixed.random(n, &mut rng);
            let text = render(&mixed.prompt);
            let (a, b) = text.split_once('+').unwrap();
            assert_eq!(a.len().max(b.len()), n, "{text}");
            assert!(a.len().min(b.len()) >= 1, "{text}");
            assert_eq!(mixed.answer.len(), n + 1, "{text}");
            let plus = a.len();
            let (a, b) = (&mixed.prompt[..plus], &mixed.prompt[plus + 1..]);
            assert_eq!(number(&mixed.answer), number(a) + number(b), "{text}");
            assert!(
                mixed.len() <= Problem::AdditionMixed.sequence_len(n),
                "{text}"
            );

            // Hints: each digit after its place's letter, the same letters in the
            // operands and the sum, and without them the same sum.
            let hinted = Problem::AdditionHints.random(n, &mut rng);
            let text = render(&hinted.prompt);
            let (a, b) = text.split_once('+').unwrap();
            let letters = |s: &str| -> String { s.chars().step_by(2).collect() };
            let digits = |s: &str| -> String { s.chars().skip(1).step_by(2).collect() };
            assert_eq!(letters(a), letters(b), "{text}");
            let sum = render(&hinted.answer);
            assert_eq!(letters(&sum)[..n], letters(a), "{text}={sum}");
            let places: Vec<u32> = hinted.answer.iter().step_by(2).copied().collect();
            assert!(places.windows(2).all(|w| w[1] == w[0] + 1), "{sum}");
            assert!(
                places[0] >= HINT && places[n] < HINT + HINTS as u32,
                "{sum}"
            );
            let token = |c: char| DIGIT + c.to_digit(10).unwrap();
            let (a, b): (Vec<u32>, Vec<u32>) = (
                digits(a).chars().map(token).collect(),
                digits(b).chars().map(token).collect(),
            );
            let sum: Vec<u32> = digits(&sum).chars().map(token).collect();
            assert_eq!(number(&sum), number(&a) + number(&b), "{text}");

            // Count: the query digit's occurrences, read from the text, in as many digits
            // as n has, least significant first.
            let count = Problem::Count.random(n, &mut rng);
            let text = render(&count.prompt);
            let (x, q) = text.split_once('+').unwrap();
            assert_eq!((x.len(), q.len()), (n, 1), "{text}");
            let times = x.matches(q).count();
            let width = n.to_string().len();
            let want: String = format!("{times:0width$}").chars().rev().collect();
            assert_eq!(render(&count.answer), want, "{text}");

            // Selective copy: half the prompt blanks, the answer the rest in order.
            let sel = Problem::SelectiveCopy.random(n, &mut rng);
            let text = render(&sel.prompt);
            assert_eq!(text.len(), n);
            assert_eq!(text.matches('+').count(), n / 2, "{text}");
            assert_eq!(render(&sel.answer), text.replace('+', ""), "{text}");

            for (p, i) in [
                (Problem::Copy, &copy),
                (Problem::Reverse, &rev),
                (Problem::Sort, &sort),
                (Problem::Duplicate, &dup),
                (Problem::Addition, &add),
                (Problem::AdditionHints, &hinted),
                (Problem::Count, &count),
                (Problem::SelectiveCopy, &sel),
            ] {
                assert_eq!(i.len(), p.sequence_len(n), "{p}");
                let seq = i.sequence();
                assert_eq!(seq[i.answer_start() - 1], 1, "the separator");
                assert_eq!(*seq.last().unwrap(), EOS);
            }
        }
    }
    // A carry reaches the last digit: 99 + 01 = 100, least significant first.
    let p: Vec<u32> = "99+10"
        .chars()
        .map(|c| match c {
            '+' => 3,
            d => DIGIT + d.to_digit(10).unwrap(),
        })
        .collect();
    assert_eq!(render(&Problem::Addition.solve(&p)), "001");
    // Twelve 7s among 12 digits: "21", least significant first.
    let sevens: Vec<u32> = [vec![DIGIT + 7; 12], vec![3, DIGIT + 7]].concat();
    assert_eq!(render(&Problem::Count.solve(&sevens)), "21");
}

/// Hints start anywhere that leaves room for the sum, so short training instances use
/// every hint; the longest instance uses them all.
#[test]
fn index_hints_start_anywhere_with_room_for_the_sum() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let first = |n: usize, rng: &mut ChaCha8Rng| -> u32 {
        Problem::AdditionHints.random(n, rng).prompt[0] - HINT
    };
    let starts: std::collections::BTreeSet<u32> = (0..5000).map(|_| first(10, &mut rng)).collect();
    let room = (HINTS - 11) as u32;
    assert_eq!(starts, (0..=room).collect(), "starts of 10-digit instances");
    let longest = Problem::AdditionHints.max_length().unwrap();
    assert_eq!(longest, HINTS - 1);
    let i = Problem::AdditionHints.random(longest, &mut rng);
    assert_eq!(
        render(&i.answer[i.answer.len() - 2..i.answer.len() - 1]),
        "Z"
    );
    assert_eq!(render(&i.prompt[..1]), "a");
}

#[test]
fn training_and_test_instances_never_overlap() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for p in Problem::ALL {
        for n in [2, 3, 6] {
            let train: Vec<Instance> = (0..300)
                .filter_map(|_| p.sample(n, false, &mut rng))
                .collect();
            let test = test_instances(p, n, 8, 200, &mut rng);
            assert!(train.len() == 300 && !test.is_empty(), "{p} {n}");
            assert!(train.iter().all(|i| !is_held_out(&i.prompt)));
            assert!(test.iter().all(|i| is_held_out(&i.prompt)));
            let seen: std::collections::HashSet<&Vec<u32>> =
                train.iter().map(|i| &i.prompt).collect();
            assert!(test.iter().all(|i| !seen.contains(&i.prompt)), "{p} {n}");
        }
        // Past the trained lengths, test instances are any instances.
        let past = test_instances(p, 12, 8, 100, &mut rng);
        assert_eq!(past.len(), 100);
        assert!(past.iter().any(|i| !is_held_out(&i.prompt)));
    }
    // About a tenth is held out.
    let held = (0..10_000)
        .filter(|_| is_held_out(&Problem::Copy.random(6, &mut rng).prompt))
        .count();
    assert!((800..1200).contains(&held), "{held}");
}

/// Greedy decoding, one token at a time with the whole prefix: the independent reference
/// for the teacher-forced measure.
fn greedy(model: &LanguageModel, prefix: &[u32], steps: usize) -> Vec<u32> {
    let mut seq = prefix.to_vec();
    for _ in 0..steps {
        let x = Tensor::new(seq.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = model.logits(&x).unwrap();
        let last = logits.narrow(1, seq.len() - 1, 1).unwrap();
        let next: u32 = last
            .flatten_all()
            .unwrap()
            .argmax(D::Minus1)
            .unwrap()
            .to_scalar()
            .unwrap();
        seq.push(next);
    }
    seq[prefix.len()..].to_vec()
}

#[test]
fn teacher_forced_exact_match_is_greedy_decoding() {
    let cfg = LengthgenConfig::default().for_task(Problem::Copy, [1, 6]);
    let varmap = VarMap::new();
    let mut model_cfg = cfg.model.clone();
    model_cfg.encoding = "rope".parse().unwrap();
    let model = LanguageModel::new(
        &model_cfg,
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
    )
    .unwrap();
    posenc_train::init::initialize(&varmap, 11).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut checked = 0;
    for n in 1..=6 {
        for _ in 0..4 {
            let prompt = Problem::Copy.random(n, &mut rng).prompt;
            let mut prefix = prompt.clone();
            prefix.push(1);
            // The untrained model's own greedy answer: the measure must call its first n
            // tokens right, and the whole exact iff its next token is the end token.
            let g = greedy(&model, &prefix, n + 1);
            let instance = Instance {
                prompt,
                answer: g[..n].to_vec(),
            };
            let s = score(&model, std::slice::from_ref(&instance)).unwrap();
            let ends = g[n] == EOS;
            assert_eq!(s.exact, f64::from(u8::from(ends)), "{g:?}");
            let want_tokens = (n + usize::from(ends)) as f64 / (n + 1) as f64;
            assert!(
                (s.token - want_tokens).abs() < 1e-12,
                "{} vs {want_tokens}",
                s.token
            );
            // One wrong answer token: never exact, one token fewer right.
            let mut wrong = instance.clone();
            wrong.answer[n - 1] = if wrong.answer[n - 1] == DIGIT {
                DIGIT + 1
            } else {
                DIGIT
            };
            let w = score(&model, &[wrong]).unwrap();
            assert_eq!(w.exact, 0.0);
            assert!(w.token < s.token);
            checked += 1;
        }
    }
    assert_eq!(checked, 24);
}

fn tiny(task: Problem) -> LengthgenConfig {
    let mut cfg = LengthgenConfig::default().for_task(task, [1, 4]);
    cfg.model.d_model = 16;
    cfg.model.d_ff = 32;
    cfg.model.layers = 1;
    cfg.model.heads = 2;
    cfg.run.steps = 12;
    cfg.run.batch_size = 8;
    cfg.run.warmup = 2;
    cfg.run.eval_every = 4;
    cfg.run.save_every = 4;
    cfg.eval_instances = 8;
    cfg
}

#[test]
fn a_resumed_run_is_bit_identical_for_every_problem() {
    for task in Problem::ALL {
        let mut cfg = tiny(task);
        cfg.model.encoding = "alibi".parse().unwrap();
        cfg.model.dropout = 0.1;
        cfg.randomized_positions = Some(40);
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let straight =
            job::train::<Lengthgen>(cfg.clone(), &(), a.path(), QUIET, &Device::Cpu).unwrap();
        let stop = RunOptions {
            stop_after: Some(6),
            ..QUIET
        };
        assert_eq!(
            job::train::<Lengthgen>(cfg.clone(), &(), b.path(), stop, &Device::Cpu)
                .unwrap()
                .step,
            6
        );
        let resumed = job::resume::<Lengthgen>(b.path(), None, &(), QUIET, &Device::Cpu).unwrap();
        assert_eq!(resumed.step, 12);
        let losses = |s: &lengthgen::LengthgenState| -> Vec<(usize, u64, u64)> {
            s.history
                .iter()
                .map(|r| (r.step, r.train_loss.to_bits(), r.valid_exact.to_bits()))
                .collect()
        };
        assert_eq!(losses(&straight), losses(&resumed), "{task}");
        for f in ["model.safetensors", "training.safetensors"] {
            assert!(
                posenc_testkit::same_tensors(&a.path().join(f), &b.path().join(f)),
                "{task}: {f}"
            );
        }
    }
}

#[test]
fn a_diverging_run_is_the_same_typed_error_as_every_task() {
    let mut cfg = tiny(Problem::Reverse);
    cfg.model.encoding = "index".parse().unwrap();
    cfg.lr = 1e30;
    cfg.min_lr = 1e30;
    let dir = tempfile::tempdir().unwrap();
    let err =
        job::train::<Lengthgen>(cfg.clone(), &(), dir.path(), QUIET, &Device::Cpu).unwrap_err();
    let d = err.diverged().unwrap_or_else(|| panic!("{err}"));
    assert!(d.step >= 1 && !d.loss.is_finite());
}

#[test]
fn labels_name_two_configurations_of_one_kind() {
    let list = parse_list(
        r#"rope,rope:base=500000,alibi:randomized=64,{"kind": "rope", "base": 100, "label": "short"},rope:layout=interleaved"#,
    )
    .unwrap();
    let labels: Vec<&str> = list.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "rope",
            "rope:base=500000",
            "alibi:randomized=64",
            "short",
            "rope:layout=interleaved"
        ]
    );
    assert_eq!(list[1].encoding.to_json()["base"], 500000.0);
    assert_eq!(list[2].randomized_positions, Some(64));
    assert_eq!(list[3].encoding.to_json()["base"], 100.0);
    check_unique(&list).unwrap();
    // The JSON form without a label is named as the short form would be.
    let json: Labelled = r#"{"kind": "rope", "base": 500000}"#.parse().unwrap();
    assert_eq!(json.label, "rope:base=500000");

    // A preset is named by its name, not by the layers it expands to.
    let presets = parse_list("llama4,gpt-oss:label=oss").unwrap();
    let labels: Vec<&str> = presets.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(labels, ["llama4", "oss"]);
    assert_eq!(presets[0].encoding.kind(), "layers");
    // A label too long for a file name (a composite written out) gets a directory that
    // a file system takes, distinct from its neighbour's.
    let long = |base: u32| {
        let of: Vec<String> = (0..12)
            .map(|i| format!(r#"{{"kind": "rope", "base": {}}}"#, base + i))
            .collect();
        format!(r#"{{"kind": "layers", "pattern": [{}]}}"#, of.join(", "))
    };
    let (a, b): (Labelled, Labelled) = (long(100).parse().unwrap(), long(200).parse().unwrap());
    assert!(a.label.len() > 255, "a label too long for a file name");
    assert!(a.dir_name().len() <= Labelled::DIR_NAME);
    assert_ne!(a.dir_name(), b.dir_name());
    assert_eq!(
        a.dir_name(),
        long(100).parse::<Labelled>().unwrap().dir_name()
    );

    let twice = parse_list("rope,none,rope").unwrap();
    let err = check_unique(&twice).unwrap_err().to_string();
    assert!(err.contains("`rope`") && err.contains("label"), "{err}");
    for bad in [
        "rope:base",
        "warp",
        "rope:nope=1",
        ":base=1",
        "{\"kind\": 3}",
    ] {
        let err = parse_list(bad).unwrap_err();
        assert!(format!("{err}").contains("in the encoding"), "{bad}: {err}");
    }
}

#[test]
fn a_tiny_experiment_writes_tidy_records_and_reuses_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LengthgenExperimentConfig::quick(Problem::Copy);
    cfg.base = tiny(Problem::Copy);
    cfg.encodings = parse_list("none,rope:base=100").unwrap();
    cfg.seeds = 2;
    cfg.test_lengths = vec![2, 4, 9];
    cfg.test_instances = 5;
    let exp = posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    assert_eq!(exp.records.len(), 2 * 2 * 3);
    assert_eq!(exp.runs.len(), 4);
    let text = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["train_lengths"], serde_json::json!([1, 4]));
    let records = json["records"].as_array().unwrap();
    for r in records {
        // Flat records: every value a number, a string, a bool or null.
        for (k, v) in r.as_object().unwrap() {
            assert!(!v.is_object() && !v.is_array(), "{k}: {v}");
        }
    }
    assert_eq!(records[0]["label"], "none");
    assert_eq!(records.last().unwrap()["label"], "rope:base=100");
    assert_eq!(records.last().unwrap()["length"], 9);
    assert_eq!(records.last().unwrap()["trained"], false);
    assert!(dir
        .path()
        .join("rope_base=100/seed-2/model.safetensors")
        .exists());
    let table = exp.table();
    assert!(
        table.contains("| rope:base=100 | 2 |") && table.contains(" 4* |"),
        "{table}"
    );

    // Run again: every run is reused, the results are the same.
    let weights = std::fs::read(dir.path().join("none/seed-1/model.safetensors")).unwrap();
    let again = posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    assert_eq!(again.records, exp.records);
    assert_eq!(
        std::fs::read(dir.path().join("none/seed-1/model.safetensors")).unwrap(),
        weights
    );
    // Other settings in the same directory are refused, nothing overwritten.
    let mut other = cfg.clone();
    other.base.lr *= 2.0;
    let err =
        posenc_train::experiment::run(&other.on(&Device::Cpu), dir.path(), QUIET).unwrap_err();
    let msg = format!("{err}");
    assert!(
        msg.contains("different config") && msg.contains("lr"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("none/seed-1/model.safetensors")).unwrap(),
        weights
    );
}

#[test]
fn a_learned_table_answers_only_within_it_and_is_checked_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LengthgenExperimentConfig::quick(Problem::Copy);
    cfg.base = tiny(Problem::Copy);
    cfg.seeds = 1;
    cfg.test_lengths = vec![2, 4, 9];
    cfg.test_instances = 3;
    // Training reaches position 9 (copying 4 digits); testing 9 digits needs 19.
    cfg.encodings = parse_list("learned:max_positions=12").unwrap();
    let exp = posenc_train::experiment::run(&cfg.on(&Device::Cpu), dir.path(), QUIET).unwrap();
    let lengths: Vec<usize> = exp.records.iter().map(|r| r.length).collect();
    assert_eq!(lengths, [2, 4]);
    assert!(exp.table().contains(" – |"), "{}", exp.table());

    // A table training itself runs past is refused before the directory is made.
    let out = dir.path().join("never");
    cfg.encodings = parse_list("learned:max_positions=5").unwrap();
    let err = posenc_train::experiment::run(&cfg.on(&Device::Cpu), &out, QUIET).unwrap_err();
    assert!(format!("{err}").contains("max_positions = 5"), "{err}");
    assert!(!out.exists());
}

#[test]
fn the_default_lineup_is_every_registered_kind_then_ruoss_randomized_ones() {
    let cfg = LengthgenExperimentConfig::full(Problem::Reverse);
    let labels: Vec<&str> = cfg.encodings.iter().map(|e| e.label.as_str()).collect();
    let kinds = posenc::EncodingConfig::kinds();
    assert_eq!(labels[..kinds.len()], kinds[..]);
    // The longest test reverses 40 digits: 82 tokens, 81 positions read.
    assert_eq!(Problem::Reverse.sequence_len(40), 82);
    let learned = &cfg.encodings[kinds.iter().position(|k| *k == "learned").unwrap()];
    assert_eq!(learned.encoding.to_json()["max_positions"], 81);
    let randomized: Vec<&str> = labels[kinds.len()..].to_vec();
    assert_eq!(
        randomized,
        [
            "sinusoidal:randomized=81",
            "learned:randomized=81",
            "rope:randomized=81",
            "alibi:randomized=81",
            "t5:randomized=81"
        ]
    );
    cfg.validate().unwrap();
}

/// A problem's name on the command line (`FromStr`, `Display`) is the one its files hold
/// (serde), for every problem.
#[test]
fn a_problems_name_is_the_same_in_commands_and_files() {
    for p in Problem::ALL {
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, format!("\"{p}\""));
        assert_eq!(p.to_string().parse::<Problem>().unwrap(), p);
        assert_eq!(serde_json::from_str::<Problem>(&json).unwrap(), p);
    }
}

/// A committed experiment's results (`docs/lengthgen/…`).
fn committed(path: &str) -> experiment::LengthgenExperiment {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lengthgen");
    experiment::LengthgenExperiment::load(&root.join(path)).unwrap()
}

#[test]
fn pooled_experiments_keep_every_seed_and_refuse_other_settings() {
    use experiment::LengthgenExperiment as Exp;
    let (first, more) = (
        committed("sort/results.json"),
        committed("sort/more-seeds/results.json"),
    );
    let pooled = Exp::merge(vec![first.clone(), more.clone()]).unwrap();
    let labels: Vec<&str> = pooled
        .config
        .encodings
        .iter()
        .map(|e| e.label.as_str())
        .collect();
    let mut expected: Vec<&str> = first
        .config
        .encodings
        .iter()
        .map(|e| e.label.as_str())
        .collect();
    expected.push("fire");
    assert_eq!(
        labels, expected,
        "the first's entries, then the second's new one"
    );
    assert_eq!(pooled.runs.len(), first.runs.len() + more.runs.len());
    assert_eq!(pooled.config.seeds, 6);
    // Each entry's mean at a length is the mean over every seed that ran it.
    for (label, rows) in pooled.summaries() {
        for row in rows {
            let xs: Vec<f64> = [&first, &more]
                .iter()
                .flat_map(|e| &e.records)
                .filter(|r| r.run.label == label && r.length == row.length)
                .map(|r| r.accuracy)
                .collect();
            assert_eq!(row.values, xs);
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            assert!((row.mean - mean).abs() < 1e-12, "{label} at {}", row.length);
        }
    }
    // The same runs twice, another task, another budget: refused by name.
    let twice = Exp::merge(vec![first.clone(), first.clone()]).unwrap_err();
    assert!(
        twice.to_string().contains("seed 1 of `none` is in two"),
        "{twice}"
    );
    let other_task = Exp::merge(vec![first.clone(), committed("copy/results.json")]).unwrap_err();
    assert!(
        other_task
            .to_string()
            .contains("differs from the first in task"),
        "{other_task}"
    );
    let mut longer = more.clone();
    longer.config.base.run.steps += 1;
    let budget = Exp::merge(vec![first.clone(), longer]).unwrap_err();
    assert!(budget.to_string().contains("in steps"), "{budget}");
    let mut renamed = more;
    assert_eq!(renamed.config.encodings[0].label, "none");
    renamed.config.encodings[0].label = "t5".into();
    let clash = Exp::merge(vec![first, renamed]).unwrap_err();
    assert!(
        clash
            .to_string()
            .contains("`t5` names two different encodings"),
        "{clash}"
    );
    assert!(Exp::merge(Vec::new()).is_err());
}

#[test]
fn mixed_addition_draws_the_shorter_length_and_the_order_apart() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (mut shorter, mut first_longer) = (std::collections::BTreeSet::new(), 0);
    for _ in 0..200 {
        let text = render(&Problem::AdditionMixed.random(6, &mut rng).prompt);
        let (a, b) = text.split_once('+').unwrap();
        shorter.insert(a.len().min(b.len()));
        first_longer += usize::from(a.len() == 6);
    }
    assert_eq!(
        shorter.into_iter().collect::<Vec<_>>(),
        (1..=6).collect::<Vec<_>>()
    );
    assert!(
        (60..=140).contains(&first_longer),
        "{first_longer} of 200 first"
    );
}

/// A run's manifest carries its kind; a run of another kind is refused by name, both to
/// read and to continue, and a run written before manifests carried a kind still reads
/// and continues.
#[test]
fn a_run_carries_its_kind_and_another_kind_is_refused() {
    let mut cfg = tiny(Problem::Copy);
    cfg.run.steps = 4;
    let dir = tempfile::tempdir().unwrap();
    job::train::<Lengthgen>(cfg, &(), dir.path(), QUIET, &Device::Cpu).unwrap();
    let path = dir.path().join("manifest.json");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(manifest["kind"], "lengthgen");
    assert_eq!(
        job::kind_of(dir.path()).unwrap().as_deref(),
        Some("lengthgen")
    );
    let write = |kind: Option<&str>| {
        let mut m = manifest.clone();
        match kind {
            Some(k) => m["kind"] = k.into(),
            None => drop(m.as_object_mut().unwrap().remove("kind")),
        }
        std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    };
    write(Some("lm"));
    for err in [
        lengthgen::load(dir.path(), &Device::Cpu).err().unwrap(),
        job::resume::<Lengthgen>(dir.path(), Some(6), &(), QUIET, &Device::Cpu).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("holds a `lm` run") && msg.contains("not a `lengthgen` run"),
            "{msg}"
        );
    }
    // As written before runs carried their kind.
    write(None);
    assert_eq!(job::kind_of(dir.path()).unwrap(), None);
    lengthgen::load(dir.path(), &Device::Cpu).unwrap();
    let state = job::resume::<Lengthgen>(dir.path(), Some(6), &(), QUIET, &Device::Cpu).unwrap();
    assert_eq!(state.step, 6);
}
