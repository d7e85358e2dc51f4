#pragma once
/// @file
/// The functional ops of kernels/ops.h under volt::nn (torch.nn.functional's names), so model code can write
/// nn::cross_entropy(logits, target) next to nn::Linear.
#include <volt/kernels/ops.h>

namespace volt::nn {

using volt::Activation;
using volt::GeluApproximate;
using volt::Reduction;
using volt::avg_pool2d;
using volt::batch_norm;
using volt::conv2d;
using volt::cross_entropy;
using volt::dropout;
using volt::embedding;
using volt::gelu;
using volt::group_norm;
using volt::layer_norm;
using volt::leaky_relu;
using volt::linear;
using volt::log_softmax;
using volt::max_pool2d;
using volt::mse_loss;
using volt::nll_loss;
using volt::one_hot;
using volt::relu;
using volt::scaled_dot_product_attention;
using volt::scaled_dot_product_attention_with_weights;
using volt::sigmoid;
using volt::silu;
using volt::softmax;
using volt::tanh;

}  // namespace volt::nn
