//! English → Kotoba: a small, fully regular, Japanese-like language (the project's toy task).
//!
//! English is subject–verb–object; Kotoba is subject–object–verb with role particles:
//!
//! ```text
//! transitive   → NP(subject) ga [PLACE] NP(object) o VERB
//! intransitive → NP(subject) ga [PLACE] VERB
//! NP → [ADJECTIVE] NOUN          PLACE → LOCATION POSTPOSITION       " and " → " soshite "
//! ```
//!
//! Swapping subject and object in English swaps the particles in Kotoba, so a model that
//! cannot see word order cannot translate. [`Sentence`] is the grammar's tree: it renders
//! both languages, is sampled by [`Sampler`], and [`Sentence::parse`] reads English back.

use rand::Rng;

/// `(English, Kotoba)` nouns.
pub const NOUNS: [(&str, &str); 16] = [
    ("dog", "inu"),
    ("cat", "neko"),
    ("bird", "tori"),
    ("fish", "sakana"),
    ("horse", "uma"),
    ("cow", "ushi"),
    ("rabbit", "usagi"),
    ("fox", "kitsune"),
    ("bear", "kuma"),
    ("mouse", "nezumi"),
    ("teacher", "sensei"),
    ("student", "gakusei"),
    ("child", "kodomo"),
    ("doctor", "isha"),
    ("friend", "tomodachi"),
    ("king", "ou"),
];

/// `(English, Kotoba)` adjectives.
pub const ADJECTIVES: [(&str, &str); 10] = [
    ("big", "ookii"),
    ("small", "chiisai"),
    ("red", "akai"),
    ("blue", "aoi"),
    ("white", "shiroi"),
    ("black", "kuroi"),
    ("old", "furui"),
    ("fast", "hayai"),
    ("slow", "osoi"),
    ("cute", "kawaii"),
];

/// The worked examples of the toy-language spec (`shared/toy-language.md`): English and
/// its one Kotoba translation.
pub const SPEC_EXAMPLES: [(&str, &str); 6] = [
    ("the dog chases the cat", "inu ga neko o oikakeru"),
    ("the cat chases the dog", "neko ga inu o oikakeru"),
    (
        "the big dog chased the small cat in the park",
        "ookii inu ga kouen de chiisai neko o oikaketa",
    ),
    (
        "the cat sleeps near the river",
        "neko ga kawa no chikaku de nemuru",
    ),
    (
        "the old teacher taught the student behind the school",
        "furui sensei ga gakkou no ushiro de gakusei o oshieta",
    ),
    (
        "the fox ran and the cute rabbit found the bear at the station",
        "kitsune ga hashitta soshite kawaii usagi ga eki de kuma o mitsuketa",
    ),
];

/// A verb's four forms: English present and past, Kotoba present and past.
pub type Verb = [&'static str; 4];

/// Transitive verbs.
pub const TRANSITIVE: [Verb; 12] = [
    ["chases", "chased", "oikakeru", "oikaketa"],
    ["sees", "saw", "miru", "mita"],
    ["eats", "ate", "taberu", "tabeta"],
    ["helps", "helped", "tasukeru", "tasuketa"],
    ["follows", "followed", "shitagau", "shitagatta"],
    ["finds", "found", "mitsukeru", "mitsuketa"],
    ["calls", "called", "yobu", "yonda"],
    ["teaches", "taught", "oshieru", "oshieta"],
    ["watches", "watched", "nagameru", "nagameta"],
    ["pushes", "pushed", "osu", "oshita"],
    ["touches", "touched", "sawaru", "sawatta"],
    ["carries", "carried", "hakobu", "hakonda"],
];

/// Intransitive verbs.
pub const INTRANSITIVE: [Verb; 6] = [
    ["sleeps", "slept", "nemuru", "nemutta"],
    ["runs", "ran", "hashiru", "hashitta"],
    ["sings", "sang", "utau", "utatta"],
    ["waits", "waited", "matsu", "matta"],
    ["plays", "played", "asobu", "asonda"],
    ["swims", "swam", "oyogu", "oyoida"],
];

/// `(English, Kotoba)` locations.
pub const LOCATIONS: [(&str, &str); 8] = [
    ("park", "kouen"),
    ("school", "gakkou"),
    ("house", "ie"),
    ("river", "kawa"),
    ("forest", "mori"),
    ("garden", "niwa"),
    ("city", "machi"),
    ("station", "eki"),
];

/// English prepositions and their Kotoba postpositions.
pub const PREPOSITIONS: [(&str, &str); 4] = [
    ("in", "de"),
    ("at", "de"),
    ("near", "no chikaku de"),
    ("behind", "no ushiro de"),
];

/// A noun phrase: an optional adjective and a noun (indices into the lexicon).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NounPhrase {
    /// Index into [`ADJECTIVES`].
    pub adjective: Option<usize>,
    /// Index into [`NOUNS`].
    pub noun: usize,
}

/// The verb of a clause: transitive with its object, or intransitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Predicate {
    /// Index into [`TRANSITIVE`] and the object.
    Transitive(usize, NounPhrase),
    /// Index into [`INTRANSITIVE`].
    Intransitive(usize),
}

/// One clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Clause {
    /// The subject.
    pub subject: NounPhrase,
    /// Verb (and object).
    pub predicate: Predicate,
    /// Past tense rather than present.
    pub past: bool,
    /// `(preposition, location)` indices.
    pub place: Option<(usize, usize)>,
}

/// A sentence: clauses joined by "and".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sentence(pub Vec<Clause>);

impl NounPhrase {
    fn english(&self, out: &mut Vec<&'static str>) {
        out.push("the");
        if let Some(a) = self.adjective {
            out.push(ADJECTIVES[a].0);
        }
        out.push(NOUNS[self.noun].0);
    }

    fn kotoba(&self, out: &mut Vec<&'static str>) {
        if let Some(a) = self.adjective {
            out.push(ADJECTIVES[a].1);
        }
        out.push(NOUNS[self.noun].1);
    }
}

impl Clause {
    fn verb(&self) -> &'static Verb {
        match self.predicate {
            Predicate::Transitive(v, _) => &TRANSITIVE[v],
            Predicate::Intransitive(v) => &INTRANSITIVE[v],
        }
    }

    /// The same clause with subject and object swapped (`None` if intransitive).
    pub fn swapped(&self) -> Option<Clause> {
        match self.predicate {
            Predicate::Transitive(v, object) => Some(Clause {
                subject: object,
                predicate: Predicate::Transitive(v, self.subject),
                ..*self
            }),
            Predicate::Intransitive(_) => None,
        }
    }

    fn english(&self, out: &mut Vec<&'static str>) {
        self.subject.english(out);
        out.push(self.verb()[usize::from(self.past)]);
        if let Predicate::Transitive(_, object) = self.predicate {
            object.english(out);
        }
        if let Some((p, l)) = self.place {
            out.extend([PREPOSITIONS[p].0, "the", LOCATIONS[l].0]);
        }
    }

    fn kotoba(&self, out: &mut Vec<&'static str>) {
        self.subject.kotoba(out);
        out.push("ga");
        if let Some((p, l)) = self.place {
            out.push(LOCATIONS[l].1);
            out.extend(PREPOSITIONS[p].1.split(' '));
        }
        if let Predicate::Transitive(_, object) = self.predicate {
            object.kotoba(out);
            out.push("o");
        }
        out.push(self.verb()[2 + usize::from(self.past)]);
    }
}

impl Sentence {
    /// The English sentence.
    pub fn english(&self) -> String {
        self.render(Clause::english, "and")
    }

    /// Its Kotoba translation.
    pub fn kotoba(&self) -> String {
        self.render(Clause::kotoba, "soshite")
    }

    fn render(&self, clause: fn(&Clause, &mut Vec<&'static str>), and: &'static str) -> String {
        let mut words = Vec::new();
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                words.push(and);
            }
            clause(c, &mut words);
        }
        words.join(" ")
    }

    /// Reads an English sentence of the grammar back into its tree, or says which word
    /// does not fit.
    pub fn parse(english: &str) -> Result<Sentence, String> {
        let words: Vec<&str> = english.split_whitespace().collect();
        let mut p = Parser {
            words: &words,
            at: 0,
        };
        let mut clauses = vec![p.clause()?];
        while p.peek().is_some() {
            p.expect("and")?;
            clauses.push(p.clause()?);
        }
        Ok(Sentence(clauses))
    }
}

struct Parser<'a> {
    words: &'a [&'a str],
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }

    fn next(&mut self, wanted: &str) -> Result<&'a str, String> {
        let w = self
            .peek()
            .ok_or_else(|| format!("expected {wanted} at the end"))?;
        self.at += 1;
        Ok(w)
    }

    fn expect(&mut self, word: &str) -> Result<(), String> {
        let w = self.next(&format!("`{word}`"))?;
        if w == word {
            Ok(())
        } else {
            Err(format!("expected `{word}`, found `{w}` (word {})", self.at))
        }
    }

    fn find<T>(
        &mut self,
        what: &str,
        table: &[T],
        key: impl Fn(&T) -> &str,
    ) -> Result<usize, String> {
        let w = self.next(what)?;
        table
            .iter()
            .position(|e| key(e) == w)
            .ok_or_else(|| format!("expected {what}, found `{w}` (word {})", self.at))
    }

    fn noun_phrase(&mut self) -> Result<NounPhrase, String> {
        self.expect("the")?;
        let adjective = match self.peek() {
            Some(w) if ADJECTIVES.iter().any(|a| a.0 == w) => {
                Some(self.find("an adjective", &ADJECTIVES, |a| a.0)?)
            }
            _ => None,
        };
        let noun = self.find("a noun", &NOUNS, |n| n.0)?;
        Ok(NounPhrase { adjective, noun })
    }

    fn clause(&mut self) -> Result<Clause, String> {
        let subject = self.noun_phrase()?;
        let w = self.next("a verb")?;
        let found = |verbs: &[Verb]| {
            verbs.iter().enumerate().find_map(|(i, v)| {
                [v[0], v[1]]
                    .iter()
                    .position(|&f| f == w)
                    .map(|tense| (i, tense == 1))
            })
        };
        let (predicate, past) = if let Some((v, past)) = found(&TRANSITIVE) {
            let object = self.noun_phrase()?;
            if object.noun == subject.noun {
                return Err(format!(
                    "subject and object are both `{}`",
                    NOUNS[object.noun].0
                ));
            }
            (Predicate::Transitive(v, object), past)
        } else if let Some((v, past)) = found(&INTRANSITIVE) {
            (Predicate::Intransitive(v), past)
        } else {
            return Err(format!("expected a verb, found `{w}` (word {})", self.at));
        };
        let place = match self.peek() {
            Some(w) if PREPOSITIONS.iter().any(|p| p.0 == w) => {
                let p = self.find("a preposition", &PREPOSITIONS, |p| p.0)?;
                self.expect("the")?;
                Some((p, self.find("a location", &LOCATIONS, |l| l.0)?))
            }
            _ => None,
        };
        Ok(Clause {
            subject,
            predicate,
            past,
            place,
        })
    }
}

/// Draws random sentences of the grammar.
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    /// Probability that a clause is transitive.
    pub transitive: f64,
    /// Probability that a noun phrase has an adjective.
    pub adjective: f64,
    /// Probability that a clause has a place.
    pub place: f64,
}

impl Default for Sampler {
    fn default() -> Self {
        Self {
            transitive: 0.6,
            adjective: 0.35,
            place: 0.4,
        }
    }
}

impl Sampler {
    fn noun_phrase(&self, rng: &mut impl Rng, not: Option<usize>) -> NounPhrase {
        let noun = loop {
            let n = rng.random_range(0..NOUNS.len());
            if Some(n) != not {
                break n;
            }
        };
        let adjective = rng
            .random_bool(self.adjective)
            .then(|| rng.random_range(0..ADJECTIVES.len()));
        NounPhrase { adjective, noun }
    }

    /// One random clause, transitive with probability `transitive` (or always, if forced).
    pub fn clause(&self, rng: &mut impl Rng, force_transitive: bool) -> Clause {
        let subject = self.noun_phrase(rng, None);
        let predicate = if force_transitive || rng.random_bool(self.transitive) {
            let object = self.noun_phrase(rng, Some(subject.noun));
            Predicate::Transitive(rng.random_range(0..TRANSITIVE.len()), object)
        } else {
            Predicate::Intransitive(rng.random_range(0..INTRANSITIVE.len()))
        };
        let past = rng.random_bool(0.5);
        let place = rng.random_bool(self.place).then(|| {
            (
                rng.random_range(0..PREPOSITIONS.len()),
                rng.random_range(0..LOCATIONS.len()),
            )
        });
        Clause {
            subject,
            predicate,
            past,
            place,
        }
    }

    /// A sentence of `clauses` random clauses.
    pub fn sentence(&self, rng: &mut impl Rng, clauses: usize) -> Sentence {
        Sentence((0..clauses).map(|_| self.clause(rng, false)).collect())
    }
}
