// Package train trains, checkpoints and samples a small byte-level
// Mixture-of-Depths language model (mod.Model) on a CPU.
//
// # Training
//
// Run(ctx, cfg, text) trains to the end and returns the model and its
// Metrics; New, Trainer.Step and Trainer.Run do the same a step at a time.
// A step draws Batch windows of SeqLen+1 bytes at random offsets of the
// training part of the text (the last HoldOut fraction is held out), runs
// mod's forward and backward pass, clips the global gradient norm to Clip
// and takes an AdamW step (nn.AdamW) at a learning rate that rises linearly
// over Warmup steps and falls along a half cosine to MinLR. Every routing
// option of the configuration works: dense, every other or all layers,
// any capacity rule, weighting, compute mode, auxiliary objective, causal
// routing, random routers (their noise and any jitter are drawn from the
// batch generator).
//
// Every EvalEvery steps and after the last, the model is evaluated on fixed
// windows of the held-out text. Metrics record per step the tokens, the
// training FLOPs (3 × mod's forward FLOPs), the wall time, the learning
// rate, the losses, the gradient norm and per layer the routed fraction,
// router-weight statistics and the predictor's accuracy against the top-k
// decisions; WriteJSONL writes them one JSON object a line.
//
// Training is deterministic: the same Config and text give the same bits
// on any GOMAXPROCS (the engine's kernels are; the loop is sequential).
//
// # Texts
//
// The tokenizer is byte-level (Vocab = 256; token = byte). DefaultText is
// the Go specification of the Go installation, $GOROOT/doc/go_spec.html
// (293,469 bytes in Go 1.26.8), needing no network; ReadText reads any file.
// A run records the text's name, length and SHA-256, and a resumed run
// refuses a different text.
//
// # Checkpoints
//
// Trainer.Save writes a directory: config.json (format, version, Config,
// text, counters, generator state), params.npz (the parameters by mod's
// names, float32, numpy.load reads them), optimizer.npz (AdamW's moments)
// and the metrics as train.jsonl and eval.jsonl. The directory is written
// beside the old one and swapped in, never half written. Load checks the
// format and version, every array's name, shape and dtype, and the text,
// and continues the run bit for bit as if it had never stopped.
//
// # Sampling
//
// CausalModel switches a model trained with top-k routing to causal
// routing (by its predictor or its router, docs/spec.md §9), and Generate
// samples from it through mod's Decoder, whose per-layer key-value caches
// hold only the tokens routed through each layer, with a temperature, top-k
// and seed; it reports per layer the fraction of bytes that went through
// the block and the tokens per second (DecodeRates compares models).
// Inspect returns how each layer routed a text, for the pictures of package
// plot.
package train
