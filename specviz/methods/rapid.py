"""RAPID (`rapid`): a RAG drafter (the draft model, by default the target's own weights, reading only the
chunks of the document retrieved for the question) drafts a chain of gamma tokens, sampled from its
distribution q; the target verifies the chain in one forward over its full long context, by speculative
sampling against the retrieval-augmented target p_hat = softmax(z / T + eta (q - p)) (eta = 0: the
target's own distribution under either rule of accept.sampling, lossless; eta > 0, always by the standard
rule: the drafter's knowledge shifts the output, which is then no longer the target's own distribution). At temperature 0 the chain is the drafter's greedy one, verified
strictly: lossless, and eta has no meaning there."""

from __future__ import annotations

import math

import torch

from specviz.accept.sampling import ACCEPTANCE_PARAM, SamplingSettings, sampling_accept
from specviz.params import Param
from specviz.runtime.loaded_model import LoadedModel
from specviz.runtime.prompts import encode
from specviz.index.embedder import shared_embedder
from specviz.drafters.draft_model import DraftModelDrafter
from specviz.errors import SpecvizError
from specviz.index.chunk_retrieval import Retrieval, retrieve
from specviz.methods.base import Method
from specviz.runtime.verify_output import DeviceSummary
from specviz.records.paper import Change, OwnChoice, PaperSettings
from specviz.tree.budget import AUTO_BUDGET, Budget


# the paper's own configuration (the page's *Paper's settings* button) and what stays ours
RAPID_PAPER = PaperSettings("rapid", "RAPID §3.1 (γ = 10; η searched in {5, 10, 20} for self-speculation; 512-token chunks, "
                       "BGE-M3 cosine ≥ 0.3, retrieval length between 4,096 tokens and 1/24 of the input), "
                       "Appendix C (temperature 1.0 on ∞Bench)", (
    Change("budget", Budget(10), AUTO_BUDGET, "§3.1 (γ = 10)", "the chain of γ sampled tokens reaches the verifier "
           "whole under the standard rule either way"),
    Change("eta", 10.0, 0.0, "§3.1 (η ∈ {5, 10, 20})", "η = 0 keeps the output on the target's own "
           "distribution (η > 0 is lossy)"),
    Change("temperature", 1.0, 0.0, "Appendix C (∞Bench)", "greedy by default; η needs a temperature"),
    Change("acceptance", "standard", "seeded", "§2.4 and Appendix B (speculative sampling's rule)",
           "the seeded rule gives every method ar's tokens for a seed (η > 0 uses the standard rule anyway)"),
    Change("retrieval_budget", 4096, 1024, "§3.1 (at least 4,096 tokens)", "our documents hold 2,000-8,000 "
           "tokens: at 4,096 the drafter reads most of them and retrieval drafts no faster than the target"),
    Change("compression", 24.0, 0.0, "§2.3 (|C^S| ≤ |C| / λ) and §3.1 (1/24)", "a fixed budget"),
    Change("ranker", "minilm", "bm25", "§3.1 (embedding cosine)", "BM25 found the evidence more often on our "
           "questions, and faster")), (
    OwnChoice("the embedder", "BGE-M3", "all-MiniLM-L6-v2 (what ships with specviz)"),
    OwnChoice("the RAG drafter", "the same or a larger model", "the target's own weights (self-speculation)"),
    OwnChoice("long contexts", "up to 128K tokens", "the shipped documents, a few thousand tokens")))


class Rapid(Method):
    name = "rapid"
    paper = RAPID_PAPER
    summary = ("RAPID: a RAG drafter (the draft model on the retrieved chunks of a long document) samples a "
               "chain; the target verifies it against the retrieval-augmented distribution (eta)")
    params = [
        Param("gamma", 10, 1, 32, int, "rapid: tokens the RAG drafter drafts per step"),
        Param("eta", 0.0, 0.0, 50.0, float, "rapid: knowledge-transfer strength in p_hat = softmax(z/T + eta (q - p)); "
                                            "0 = lossless; needs temperature > 0"),
        Param("chunk_tokens", 512, 16, 2048, int, "rapid: tokens per document chunk"),
        Param("retrieval_budget", 1024, 16, 8192, int, "rapid: tokens of retrieved chunks the drafter reads (with "
                                                        "compression > 0: at least)"),
        Param("compression", 0.0, 0.0, 1000.0, float, "rapid: λ; > 0 lets the drafter read |C| / λ tokens of the "
                                                      "document's |C| when that is more than retrieval_budget "
                                                      "(the paper: λ = 24, at least 4,096); 0 = retrieval_budget"),
        Param("min_similarity", 0.3, -1.0, 1.0, float, "rapid: chunks below this cosine similarity are not "
                                                       "retrieved (minilm ranker)"),
        Param("ranker", "bm25", 0, 0, str, "rapid: how chunks are ranked against the question: BM25 on words, or "
                                            "cosine of all-MiniLM-L6-v2 embeddings", choices=("bm25", "minilm")),
        ACCEPTANCE_PARAM,
    ]
    uses_draft_model = True

    @classmethod
    def check_sampling(cls, params: dict, sampling: SamplingSettings) -> None:
        if sampling.greedy and float(params["eta"]) > 0:
            raise SpecvizError("eta has no effect at temperature 0: greedy verification compares argmaxes and "
                               "p_hat = softmax(z / T + eta (q - p)) needs a temperature. Set a temperature > 0, "
                               "or eta = 0.")

    @classmethod
    def lossless(cls, params: dict, temperature: float) -> bool:
        return temperature == 0 or float(params["eta"]) == 0

    def build(self, lm, p, draft):
        self.retrieval: Retrieval | None = None
        self.notes: list[str] = []
        if draft is not None and not isinstance(draft, LoadedModel):  # the trained head, or its MissingHead
            # the RAG drafter reads a prompt of its own, and a head drafts from the target's features of the
            # target's context: the target's own weights read the chunks instead
            self.notes.append("RAPID's RAG drafter reads its own prompt and the draft head drafts from the "
                              "target's context: the target's own weights draft here")
            draft = None
        drafter = DraftModelDrafter(draft or lm, lm.vocab_size, breadth=1, branch_levels=0, depth=p["gamma"],
                                    sampler=(self.sampling, self.noise))
        if self.prompt is None:
            self.notes.append("Started from token ids: no document to retrieve from; the drafter reads the whole prompt")
            return [drafter]
        embedder = shared_embedder() if p["ranker"] == "minilm" and self.prompt.document else None
        self.retrieval = retrieve(lm.tokenizer, self.prompt.document, self.prompt.question, p["chunk_tokens"],
                                  self.retrieval_budget(lm, p), p["min_similarity"], p["ranker"], embedder)
        if self.retrieval.note:
            self.notes.append(f"RAG drafter: {self.retrieval.note}")
        own = encode(lm.tokenizer, self.prompt.with_document(self.retrieval.context), lm.max_context)
        target = self.prompt.ids or tuple(encode(lm.tokenizer, list(self.prompt.messages), lm.max_context))
        if own[-1] != target[-1]:
            self.notes.append("The drafter's prompt ends in another token than the target's; it reads the whole prompt")
        else:
            drafter.use_prompt(own, len(target))
        self.draft_prompt_len = len(own)
        return [drafter]

    def retrieval_budget(self, lm, p: dict) -> int:
        """Tokens of chunks the drafter reads: retrieval_budget, or |C| / λ of the document's |C| tokens
        where compression λ > 0 makes that larger (RAPID §4.1: between 4,096 and 1/24 of the input)."""
        if p["compression"] <= 0 or not self.prompt.document:
            return p["retrieval_budget"]
        document_tokens = len(lm.tokenizer(self.prompt.document, add_special_tokens=False).input_ids)
        return max(p["retrieval_budget"], math.ceil(document_tokens / p["compression"]))

    @property
    def warnings(self) -> list[str]:
        return list(self.notes)

    @property
    def verifies_by_seed(self) -> bool:
        return super().verifies_by_seed and (self.sampling.greedy or float(self.param_values["eta"]) == 0)

    def accept(self, tree, logits: torch.Tensor, sampling: SamplingSettings, generator: torch.Generator,
               root_position: int, summary: DeviceSummary | None = None):
        if sampling.greedy or float(self.param_values["eta"]) == 0:  # lossless: either rule, as every method
            return super().accept(tree, logits, sampling, generator, root_position, summary)
        # eta > 0 (lossy): RAPID's test against p_hat, coins from the session's generator
        eta = float(self.param_values["eta"])
        return sampling_accept(tree, logits, sampling, generator, eta=eta, summary=summary)
