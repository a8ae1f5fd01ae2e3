//! budgetgate host shim.
