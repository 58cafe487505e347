"""A Hugging Face Trainer job (accelerate underneath): a tiny BERT built from a config (no hub access), a tokenised
in-memory dataset, DataCollatorWithPadding. The model step is far heavier than the padding collator, so the job is
compute-bound. Samples per step must be the batch (8), not the one __getitems__ call that fetched it.

argv: OUT_DIR [max_steps]
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

from datasets import Dataset  # noqa: E402


def tokenizer():
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i + 4 for i in range(500)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


if __name__ == "__main__":
    torch.set_num_threads(1)
    out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    tok = tokenizer()
    g = torch.Generator().manual_seed(0)
    texts = [" ".join(f"w{int(j)}" for j in torch.randint(0, 500, (int(n),), generator=g))
             for n in torch.randint(40, 96, (320,), generator=g)]
    ds = Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(320)]})
    ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=128), batched=True, remove_columns=["text"])
    model = BertForSequenceClassification(BertConfig(vocab_size=510, hidden_size=128, num_hidden_layers=4,
                                                     num_attention_heads=4, intermediate_size=512, num_labels=2))
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=steps, report_to="none",
                             logging_strategy="no", save_strategy="no", use_cpu=True, dataloader_num_workers=0,
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok)).train()
