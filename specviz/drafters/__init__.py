"""Draft sources. Each drafter proposes a DraftTree under the current root and learns from each step."""
