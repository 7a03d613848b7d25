//! Black-box tests of the `sites-operator` binary. One test binary with modules: faster to link
//! than one binary per file.

mod cli;
