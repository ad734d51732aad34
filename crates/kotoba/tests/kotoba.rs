//! The generator against the spec (`toy-language.md`): every example, every lexicon entry,
//! every rule. Expected strings are written from the spec, not from the generator.

use std::collections::HashSet;

use posenc_kotoba::data::{generate, DataConfig};
use posenc_kotoba::kotoba::*;
use posenc_kotoba::vocab::{Vocab, BOS_ID, EOS_ID, PAD_ID, SPECIALS};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn translate(english: &str) -> String {
    let s = Sentence::parse(english).unwrap_or_else(|e| panic!("{english}: {e}"));
    assert_eq!(s.english(), english, "parse/render round trip");
    s.kotoba()
}

#[test]
fn the_spec_examples() {
    for (en, ko) in SPEC_EXAMPLES {
        assert_eq!(translate(en), ko, "{en}");
    }
}

#[test]
fn every_lexicon_entry() {
    let nouns = "dog inu cat neko bird tori fish sakana horse uma cow ushi rabbit usagi fox kitsune \
                 bear kuma mouse nezumi teacher sensei student gakusei child kodomo doctor isha friend tomodachi king ou";
    let pairs = |s: &'static str| -> Vec<(&'static str, &'static str)> {
        let w: Vec<&str> = s.split_whitespace().collect();
        w.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    let nouns = pairs(nouns);
    assert_eq!(nouns.len(), 16);
    for (en, ko) in &nouns {
        assert_eq!(
            translate(&format!("the {en} sleeps")),
            format!("{ko} ga nemuru")
        );
    }
    let adjectives = pairs("big ookii small chiisai red akai blue aoi white shiroi black kuroi old furui fast hayai slow osoi cute kawaii");
    assert_eq!(adjectives.len(), 10);
    for (en, ko) in adjectives {
        assert_eq!(
            translate(&format!("the {en} king runs")),
            format!("{ko} ou ga hashiru")
        );
    }
    let transitive = "chases chased oikakeru oikaketa sees saw miru mita eats ate taberu tabeta helps helped tasukeru tasuketa \
        follows followed shitagau shitagatta finds found mitsukeru mitsuketa calls called yobu yonda \
        teaches taught oshieru oshieta watches watched nagameru nagameta pushes pushed osu oshita \
        touches touched sawaru sawatta carries carried hakobu hakonda";
    let intransitive =
        "sleeps slept nemuru nemutta runs ran hashiru hashitta sings sang utau utatta \
        waits waited matsu matta plays played asobu asonda swims swam oyogu oyoida";
    let verbs = |s: &str| -> Vec<Vec<String>> {
        let w: Vec<String> = s.split_whitespace().map(String::from).collect();
        w.chunks(4).map(|c| c.to_vec()).collect()
    };
    assert_eq!(verbs(transitive).len(), 12);
    for v in verbs(transitive) {
        assert_eq!(
            translate(&format!("the fox {} the bear", v[0])),
            format!("kitsune ga kuma o {}", v[2])
        );
        assert_eq!(
            translate(&format!("the fox {} the bear", v[1])),
            format!("kitsune ga kuma o {}", v[3])
        );
    }
    assert_eq!(verbs(intransitive).len(), 6);
    for v in verbs(intransitive) {
        assert_eq!(
            translate(&format!("the cow {}", v[0])),
            format!("ushi ga {}", v[2])
        );
        assert_eq!(
            translate(&format!("the cow {}", v[1])),
            format!("ushi ga {}", v[3])
        );
    }
    let locations = pairs("park kouen school gakkou house ie river kawa forest mori garden niwa city machi station eki");
    let prepositions = [
        ("in", "de"),
        ("at", "de"),
        ("near", "no chikaku de"),
        ("behind", "no ushiro de"),
    ];
    for (l_en, l_ko) in &locations {
        for (p_en, p_ko) in prepositions {
            assert_eq!(
                translate(&format!("the child sings {p_en} the {l_en}")),
                format!("kodomo ga {l_ko} {p_ko} utau")
            );
        }
    }
    assert_eq!(
        (
            NOUNS.len(),
            ADJECTIVES.len(),
            TRANSITIVE.len(),
            INTRANSITIVE.len(),
            LOCATIONS.len()
        ),
        (16, 10, 12, 6, 8)
    );
}

#[test]
fn rules() {
    // The place phrase moves from last to right after the subject, before the object.
    assert_eq!(
        translate("the dog eats the fish at the house"),
        "inu ga ie de sakana o taberu"
    );
    // Each clause picks its own tense; "and" is "soshite".
    assert_eq!(
        translate("the dog runs and the cat slept"),
        "inu ga hashiru soshite neko ga nemutta"
    );
    // The two nouns of a transitive clause differ.
    assert!(Sentence::parse("the dog sees the big dog")
        .unwrap_err()
        .contains("dog"));
    // At most one adjective; articles required; no trailing words.
    assert!(Sentence::parse("the big red dog runs").is_err());
    assert!(Sentence::parse("dog runs").is_err());
    assert!(Sentence::parse("the dog runs the").is_err());
    assert!(Sentence::parse("the dog runs quickly")
        .unwrap_err()
        .contains("quickly"));
}

#[test]
fn sampled_sentences_follow_the_grammar() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let sampler = Sampler::default();
    for i in 0..2000 {
        let s = sampler.sentence(&mut rng, 1 + i % 4);
        assert_eq!(Sentence::parse(&s.english()).unwrap(), s);
        assert_eq!(s.english().matches(" and ").count(), i % 4);
        assert_eq!(s.kotoba().matches(" soshite ").count(), i % 4);
        for c in &s.0 {
            if let Predicate::Transitive(_, o) = c.predicate {
                assert_ne!(o.noun, c.subject.noun);
            }
        }
    }
}

#[test]
fn splits_are_deterministic_disjoint_and_shaped() {
    let cfg = DataConfig {
        train: 3000,
        valid: 100,
        test: 200,
        test_long: 100,
        order_swap: 100,
        seed: 5,
    };
    let a = generate(&cfg).unwrap();
    let b = generate(&cfg).unwrap();
    assert_eq!(a.train, b.train);
    assert_eq!(a.order_swap, b.order_swap);
    assert_ne!(
        generate(&DataConfig {
            seed: 6,
            ..cfg.clone()
        })
        .unwrap()
        .train,
        a.train
    );
    let train: HashSet<&str> = a.train.iter().map(|p| p.src.as_str()).collect();
    assert_eq!(train.len(), a.train.len(), "train repeats a sentence");
    for split in [&a.valid, &a.test, &a.test_long] {
        assert!(split.iter().all(|p| !train.contains(p.src.as_str())));
    }
    for p in a.train.iter().chain(&a.test) {
        assert!(p.src.matches(" and ").count() <= 1);
    }
    for p in &a.test_long {
        assert!((2..=3).contains(&p.src.matches(" and ").count()));
    }
    for (x, y) in &a.order_swap {
        assert!(!train.contains(x.src.as_str()) && !train.contains(y.src.as_str()));
        let (sx, sy) = (
            Sentence::parse(&x.src).unwrap(),
            Sentence::parse(&y.src).unwrap(),
        );
        assert_eq!(sx.0[0].swapped().unwrap(), sy.0[0]);
        assert_ne!(x.tgt, y.tgt);
        assert_eq!(x.tgt, sx.kotoba());
    }
}

#[test]
fn tokenizer_round_trip() {
    let data = generate(&DataConfig {
        train: 2000,
        ..DataConfig::default()
    })
    .unwrap();
    let src = Vocab::train(data.train.iter().map(|p| p.src.as_str())).unwrap();
    let tgt = Vocab::train(data.train.iter().map(|p| p.tgt.as_str())).unwrap();
    for (i, s) in SPECIALS.iter().enumerate() {
        assert_eq!(src.id(s), Some(i as u32));
    }
    assert_eq!((PAD_ID, BOS_ID, EOS_ID), (0, 1, 2));
    // Every English word of the lexicon, and nothing of Kotoba's, is in the source vocabulary.
    assert!(src.id("chases").is_some() && src.id("the").is_some() && src.id("inu").is_none());
    for p in data.test.iter().take(200) {
        let ids = src.encode(&p.src, 1).unwrap();
        assert_eq!(src.decode(&ids), p.src);
        assert_eq!(src.encode_lossy(&p.src).unwrap(), ids);
        let ids = tgt.encode(&p.tgt, 1).unwrap();
        assert_eq!(tgt.decode(&[ids.clone(), vec![EOS_ID, 7]].concat()), p.tgt);
    }
    let e = src.encode("the dog\tchases the zebra", 3).unwrap_err();
    assert_eq!((e.word.as_str(), e.line), ("zebra", 3));
    assert!(e.to_string().contains("zebra") && e.to_string().contains("line 3"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    src.save(&path).unwrap();
    let back = Vocab::load(&path).unwrap();
    assert_eq!(back.len(), src.len());
    assert_eq!(
        back.encode("the cat runs", 1).unwrap(),
        src.encode("the cat runs", 1).unwrap()
    );
    assert!(Vocab::load(&dir.path().join("missing.json"))
        .unwrap_err()
        .to_string()
        .contains("missing.json"));
}
