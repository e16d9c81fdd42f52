"""Saves a tiny random Llama and a word-level tokenizer into DIR, as a paper's
released checkpoint would be laid out (no download): `python hf_tiny.py DIR`."""
import sys

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ("the cat sat on a mat while dogs ran past big red barns and small blue boats "
         "under grey skies").split()


def main(out: str) -> None:
    vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<s>", "</s>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                            bos_token="<s>", eos_token="</s>").save_pretrained(out)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         max_position_embeddings=256, pad_token_id=1, bos_token_id=2,
                         eos_token_id=3)
    LlamaForCausalLM(config).save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1])
