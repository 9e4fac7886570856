"""The special token ids, fixed for every vocabulary this package trains.

The model, decoding, the loss and the data pipeline all read them from here (the tokenizer
trains SentencePiece with exactly these ids, and refuses a model that has others):

====  =====  ===========================================
id    piece  use
====  =====  ===========================================
0     <pad>  padding; ignored by the loss and masked in attention
1     <unk>  pieces outside the vocabulary
2     <s>    BOS: first decoder input
3     </s>   EOS: ends every source and every target
====  =====  ===========================================
"""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
N_SPECIAL = 4  # ids below this are special: they belong to no word
