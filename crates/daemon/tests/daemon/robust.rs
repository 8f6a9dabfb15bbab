//! Robustness and load: bad requests, slow and vanishing clients, limits, many clients.

use crate::harness::*;
