"""Privacy in decentralised learning (issue 45): differentially private mechanisms and their accountants (DP-SGD,
Muffliato's and correlated noise's ledgers); one file per mechanism (docs/privacy.md). The curious neighbours'
attacks that measure what a run leaks are p2pfl.curious."""
