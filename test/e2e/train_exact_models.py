# Training through rank files (SPEC section 10) on the models nobody here wrote and the mixed
# forward / forward-method case: train_exact.py's vit, resnet, resnet_cl, resnet_features and two_paths
# (what each is and what is checked: that file's header), at W = 1 and 2, SGD and AdamW. A lit
# test of its own so that neither half comes near lit's 300 s limit on a busy 2-core machine.
#
# RUN: rm -rf %t && mkdir -p %t
# RUN: %python %S/train_exact.py --model vit --worlds 1,2 --optim sgd,adamw %t
# RUN: %python %S/train_exact.py --model resnet --worlds 1,2 --optim sgd,adamw %t
# RUN: %python %S/train_exact.py --model resnet_cl --worlds 1,2 --optim sgd,adamw %t
# RUN: %python %S/train_exact.py --model resnet_features --worlds 1,2 --optim sgd,adamw %t
# RUN: %python %S/train_exact.py --model two_paths --worlds 1,2 --optim sgd,adamw %t
