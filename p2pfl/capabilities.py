"""The capabilities a method declares (`p2pfl.method.Algorithm.capabilities`) and the run asks about instead of the
method's name; a leaf module, so that the configuration's checks read them without importing a method."""

#: --mode async runs the method (AD-PSGD): `async_vector` / `load_async_vector` read and write the vector a pair
#: averages, and its peers' records hold a `scheme` dict, where the pending update waits.
ASYNCHRONOUS = "asynchronous"
#: A topology that moves models between peers (teleport) may hand its peers' models over: `carried` / `carry` read
#: and write the vector a peer's model is (what gossip mixes), and the hand-over moves it as a message.
HANDS_OVER = "hands-over"
#: Its `local_loss` takes a batch of several peers, so a rank's co-located peers may train peer-stacked
#: (--batch-peers; p2pfl.algorithms.trainer).
BATCHABLE = "batchable"
#: Its mix is the W-weighted gossip of one vector per peer, its model: a --gossip scheme may mix it instead of the
#: plain average (p2pfl.gossip.schemes.Scheme.needs), and --compress encode its messages.
MIXES_BY_W = "mixes-by-w"
#: It hands a --gossip scheme its local update as a gradient G (the learners, the quadratic problem; not consensus,
#: which has no gradient).
GIVES_GRADIENTS = "gives-gradients"
#: Feature vectors (a tabular --dataset: rows N×F, float32, standardised when read) rather than images. A dataset
#: declares it when it gives them, a model when it takes them (mlp), a method when its local step and scoring apply
#: no image transform (the supervised learners); a run pairs a dataset that gives them with a method and a model
#: that take them (p2pfl.data.datasets._base.Dataset.check).
FEATURES = "features"
#: Token sequences (a text --dataset: rows N×T of int64 token ids; next-token prediction, the target of position t
#: is token t+1) rather than images. Declared as FEATURES is: by a dataset that gives them (leaf:), a model that
#: takes them and them only (char-lstm, char-transformer: ids in, one feature vector per position out), a method
#: whose local step and scoring predict the next token (the fedavg family: token accuracy and perplexity);
#: p2pfl.data.datasets._base.Dataset.check pairs them, and refuses a model of token ids on any other dataset.
TOKENS = "tokens"
#: Token sequences with one label each (a text --dataset of labelled sequences, sent140:: rows N×T of int64 token ids
#: padded with a padding id; the task is the sequence's class, e.g. a tweet's sentiment) rather than images or
#: next-token prediction. Declared by the dataset that gives them, by a model that classifies a sequence (char-lstm,
#: char-transformer: built with the padding id, they give the features of the last position holding a token), and
#: by a method whose local step and scoring take a sequence's label (the fedavg family: cross-entropy on the label,
#: test_acc its accuracy); p2pfl.data.datasets._base.Dataset.check pairs them as it pairs TOKENS.
SEQUENCE_LABELS = "sequence-labels"
#: Its data come from the run's workload (p2pfl.data.workload) and its scores from the workload's test split, so
#: --validation may carve a held-out split from the training data for it to be scored on instead (the learners; not
#: consensus or the quadratic problem, which have no data, nor FedMuscle, whose tasks load their own).
HOLDS_OUT = "holds-out"
#: Its loss is a mean over the batch of per-sample terms, each depending on its own sample only (and on reference
#: models' outputs for that sample), so each sample's gradient is its own: DP-SGD's per-sample clipping applies
#: (--dp-clip, p2pfl.privacy.dp_sgd). The supervised learners declare it; a loss that couples the samples of a batch
#: (contrastive SSL: SimCLR's negatives are the batch's other samples) cannot, nor a model with BatchNorm's batch
#: statistics (refused when the model is built).
PER_SAMPLE = "per-sample-gradients"
