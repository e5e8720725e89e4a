//! Class 5: tenants (filled in with the policy-set changes).
