//! The process-wide settings a program asks for first thing in `main`. One test in its own
//! binary: it changes the environment, which no other test in this process reads.

#[test]
fn tune_for_training_sets_one_candle_thread_unless_asked_otherwise() {
    std::env::set_var("CANDLE_NUM_THREADS", "3");
    posenc_transformer::tune_for_training();
    assert_eq!(std::env::var("CANDLE_NUM_THREADS").as_deref(), Ok("3"));
    std::env::remove_var("CANDLE_NUM_THREADS");
    posenc_transformer::tune_for_training();
    assert_eq!(std::env::var("CANDLE_NUM_THREADS").as_deref(), Ok("1"));
}
