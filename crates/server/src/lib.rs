//! amphora-server (skeleton)
