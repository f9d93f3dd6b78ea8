"""AlphaEdit (Fang et al., ICLR 2025): MEMIT's update projected onto the null space of preserved knowledge."""
