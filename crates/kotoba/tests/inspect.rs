//! Attention maps read from the shipped model: the right shapes, the translation the
//! model actually gives, and rows that are probability distributions.

use candle_core::Device;
use posenc_kotoba::decode::DecodeConfig;
use posenc_kotoba::task::{shipped_model, Translator};

#[test]
fn attention_maps_follow_the_translation() {
    let t = Translator::load(&shipped_model(), &Device::Cpu).unwrap();
    let sentence = "the big dog eats the fish near the river";
    let maps = t.attention(sentence).unwrap();
    let said = t
        .translate(&[sentence.to_string()], &DecodeConfig::default())
        .unwrap()
        .remove(0);
    let mut words: Vec<&str> = said.split(' ').collect();
    words.push("</s>");
    assert_eq!(maps.target, words);
    let mut source: Vec<&str> = sentence.split(' ').collect();
    source.push("</s>");
    assert_eq!(maps.source, source);

    let cfg = t.model.config();
    assert_eq!(maps.encoder.len(), cfg.encoder_layers);
    assert_eq!(maps.cross.len(), cfg.decoder_layers);
    let (s, n) = (maps.source.len(), maps.target.len());
    for layer in &maps.encoder {
        assert_eq!(layer.len(), cfg.heads);
        for head in layer {
            assert_eq!((head.len(), head[0].len()), (s, s));
        }
    }
    for layer in &maps.cross {
        for head in layer {
            assert_eq!((head.len(), head[0].len()), (n, s));
        }
    }
    for row in maps.encoder.iter().chain(&maps.cross).flatten().flatten() {
        let sum: f32 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-5, "a row sums to {sum}");
        assert!(row.iter().all(|&w| (0.0..=1.0).contains(&w)));
    }
}

#[test]
fn attention_of_an_unknown_word_names_it() {
    let t = Translator::load(&shipped_model(), &Device::Cpu).unwrap();
    let err = t.attention("the cat sees the zebra").unwrap_err();
    assert!(format!("{err:#}").contains("zebra"), "{err:#}");
}

/// Sentences of the shipped model's valid, test and order-swap splits on which beam search
/// of width 4 used to return a translation that skipped a word (it stopped at the first
/// four finished hypotheses, while the right one, a step longer, was still alive). Beam
/// search must find the grammar's translation, as greedy search does.
#[test]
fn beam_search_finds_what_greedy_finds_on_the_shipped_model() {
    use posenc_kotoba::decode::DecodeConfig;
    use posenc_kotoba::kotoba::Sentence;
    let t = Translator::load(&shipped_model(), &Device::Cpu).unwrap();
    let sources: Vec<String> = [
        "the bird follows the white friend and the dog carries the fish near the park",
        "the fast cat finds the bear and the cat watched the old fox at the river",
        "the cute cow ran and the bear helped the dog near the house",
        "the friend swims and the fast fish called the fox behind the school",
        "the king found the cow and the old friend helped the fox near the city",
        "the king waits near the park and the fast doctor called the horse behind the river",
        "the friend slept and the big bear saw the white friend near the school",
        "the student chases the doctor behind the river",
    ]
    .map(String::from)
    .to_vec();
    let expected: Vec<String> = sources
        .iter()
        .map(|s| Sentence::parse(s).unwrap().kotoba())
        .collect();
    for beam in [1, 2, 4, 8] {
        let cfg = DecodeConfig {
            beam,
            ..Default::default()
        };
        let got = t.translate(&sources, &cfg).unwrap();
        for ((got, want), source) in got.iter().zip(&expected).zip(&sources) {
            assert_eq!(got, want, "beam {beam}: {source}");
        }
    }
}
