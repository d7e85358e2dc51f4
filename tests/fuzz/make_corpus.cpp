// Writes the seed corpora of the fuzz targets into <out>/<target>/ (tests/fuzz/corpus is its committed
// output): small valid files made by Volt itself plus truncated and corrupted variants.
//   fuzz_make_corpus <out-dir> [fashion-mnist-dir]
// Build: cmake --build <build> --target fuzz_make_corpus (configured with -DVOLT_FUZZ=ON).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <volt/data/idx.h>
#include "data/image_files.h"
#include <volt/data/npy.h>
#include <volt/data/npz.h>
#include <volt/nn/layers/linear.h>
#include <volt/nn/serialization.h>
#include <volt/trainer/callbacks/early_stopping.h>
#include <volt/trainer/callbacks/model_checkpoint.h>
#include "trainer/trainer_test_util.h"

using namespace volt;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A valid file plus: truncated to half, cut inside the header, one flipped byte in the header and one in the
// body, and trailing garbage.
void variants(const fs::path& dir, const std::string& name, const std::string& bytes, size_t header_end) {
  put(dir / name, bytes);
  put(dir / (name + ".trunc_half"), bytes.substr(0, bytes.size() / 2));
  put(dir / (name + ".trunc_header"), bytes.substr(0, std::min(bytes.size(), header_end) / 2 + 1));
  std::string h = bytes;
  h[std::min(h.size() - 1, header_end / 2)] ^= 0x5a;
  put(dir / (name + ".flip_header"), h);
  std::string b = bytes;
  b[b.size() - 1 - (b.size() - header_end) / 3] ^= 0xff;
  put(dir / (name + ".flip_body"), b);
  put(dir / (name + ".trailing"), bytes + "junk");
}

void idx_corpus(const fs::path& dir, const std::string& mnist) {
  fs::path tmp = dir / "tmp.idx";
  auto file = [&](const Tensor& t, bool gz) {
    data::write_idx(tmp.string(), t, gz);
    std::string s = slurp(tmp);
    fs::remove(tmp);
    return s;
  };
  // Two real Fashion-MNIST test images and labels when the dataset is installed, else a synthetic pattern.
  Tensor images, labels;
  if (!mnist.empty() && fs::exists(fs::path(mnist) / "t10k-images-idx3-ubyte.gz")) {
    images = data::read_idx((fs::path(mnist) / "t10k-images-idx3-ubyte.gz").string(), 3).slice(0, 0, 2).contiguous();
    labels = data::read_idx((fs::path(mnist) / "t10k-labels-idx1-ubyte.gz").string(), 1).slice(0, 0, 2).contiguous();
  } else {
    std::vector<float> v(2 * 28 * 28);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7) % 256);
    images = from_vector(v, {2, 28, 28}).to(DType::u8);
    labels = from_vector(std::vector<float>{9, 2}, {2}).to(DType::u8);
  }
  Tensor small = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 2, 2}).to(DType::u8);
  variants(dir, "images2x28x28.idx", file(images, false), 16);
  variants(dir, "images2x28x28.idx.gz", file(images, true), 10);
  variants(dir, "labels2.idx", file(labels, false), 8);
  variants(dir, "labels2.idx.gz", file(labels, true), 10);
  variants(dir, "small3x2x2.idx", file(small, false), 16);
  variants(dir, "small3x2x2.idx.gz", file(small, true), 10);
}

void npy_corpus(const fs::path& dir) {
  auto npy_header_end = [](const std::string& s) {
    const size_t len_bytes = s[6] == 1 ? 2 : 4;
    size_t n = 0;
    for (size_t i = 0; i < len_bytes; ++i) n |= static_cast<size_t>(static_cast<uint8_t>(s[8 + i])) << (8 * i);
    return 8 + len_bytes + n;
  };
  auto npy = [&](const std::string& name, const Tensor& t, const data::NpyWriteOptions& o) {
    const std::string s = data::npy_bytes(t, o);
    variants(dir, name, s, npy_header_end(s));
  };
  Tensor f = from_vector(std::vector<float>{1.5f, -2, 3, 0.25f, 5, -6}, {2, 3});
  npy("f32_2x3.npy", f, {});
  npy("f64_2x3_big_fortran.npy", f.to(DType::f64), {.big_endian = true, .fortran_order = true});
  npy("f16_v2.npy", f.to(DType::f16), {.version = 2});
  npy("i64_v3.npy", from_vector(std::vector<float>{-1, 7, 300}, {3}).to(DType::i64), {.version = 3});
  npy("u8_0d.npy", scalar_tensor(200, DType::u8), {});
  npy("bool_2x2.npy", from_vector(std::vector<float>{1, 0, 0, 1}, {2, 2}).to(DType::boolean), {});
  fs::path tmp = dir / "tmp.npz";
  auto npz = [&](const std::string& name, bool compress) {
    data::write_npz(tmp.string(), {{"x", f}, {"y", from_vector(std::vector<float>{0, 1}, {2}).to(DType::i64)}},
                    compress);
    const std::string s = slurp(tmp);
    fs::remove(tmp);
    variants(dir, name, s, 30 + 5 + 64);  // the first member's local header, name and .npy header
  };
  npz("xy_stored.npz", false);
  npz("xy_deflate.npz", true);
}

void safetensors_corpus(const fs::path& dir) {
  fs::path tmp = dir / "tmp.safetensors";
  auto file = [&](const nn::StateDict& sd, const std::map<std::string, std::string>& meta) {
    nn::save_safetensors(tmp.string(), sd, meta);
    std::string s = slurp(tmp);
    fs::remove(tmp);
    return s;
  };
  auto header_end = [](const std::string& s) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(s[i])) << (8 * i);
    return static_cast<size_t>(8 + n);
  };
  seed_everything(3);
  nn::Linear lin(3, 2);
  std::string a = file(lin.state_dict(), {{"format", "volt-checkpoint"}});
  variants(dir, "linear3x2.safetensors", a, header_end(a));
  nn::StateDict mixed = {
      {"f32", from_vector(std::vector<float>{1.5f, -2.0f}, {2})},
      {"f64", from_vector(std::vector<float>{3.0f}, {1}).to(DType::f64)},
      {"bf16", from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).to(DType::bf16)},
      {"f16", from_vector(std::vector<float>{0.5f}, {1}).to(DType::f16)},
      {"i64", from_vector(std::vector<float>{7, 8}, {2}).to(DType::i64)},
      {"i32", from_vector(std::vector<float>{-1}, {1}).to(DType::i32)},
      {"u8", from_vector(std::vector<float>{255, 0, 1}, {3}).to(DType::u8)},
      {"bool", from_vector(std::vector<float>{1, 0}, {2}).to(DType::boolean)},
      {"scalar", from_vector(std::vector<float>{42}, {})},
      {"empty", zeros({0, 3})},
  };
  std::string b = file(mixed, {});
  variants(dir, "dtypes.safetensors", b, header_end(b));
  put(dir / "empty_dict.safetensors", file({}, {{"k", "v"}}));
}

void trainer_state_corpus(const fs::path& dir) {
  // A checkpoint as Trainer::save_checkpoint writes it: Adam + two schedulers, early stopping and model
  // checkpoint callback states, hparams.
  test::ScratchDir scratch("fuzz_corpus");
  const std::string ck = (scratch.path / "ck").string();
  struct Module : test::TinyModule {
    Module() {
      save_hyperparameters({{"lr", 0.05}, {"hidden", 3}, {"name", "tiny"}});
      make_optimizers = [](test::TinyModule& mm) {
        auto opt = std::make_shared<optim::Adam>(mm.parameters(), optim::AdamOptions{.lr = 0.05});
        Optimizers o(opt);
        o.schedulers.push_back({std::make_shared<optim::StepLR>(*opt, 1, 0.5), SchedulerInterval::epoch, 1});
        o.schedulers.push_back(
            {std::make_shared<optim::LambdaLR>(*opt, [](int64_t s) { return 1.0 / (1.0 + 0.1 * s); }), SchedulerInterval::step, 1});
        return o;
      };
      on_val_step = [](test::TinyModule& m, const Batch&, int64_t, const Tensor& loss) { m.log("val_loss", loss); };
    }
  } module;
  auto o = test::quiet(scratch.str());
  o.max_epochs = 1;
  o.seed = 1234;
  o.callbacks = {std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.dirpath = ck, .filename = "c",
                                                                          .monitor = "val_loss"}),
                 std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "val_loss"})};
  Trainer t(o);
  t.fit(module, test::make_loader(6, 3), test::make_loader(4, 2));
  std::string js = slurp(fs::path(ck) / "c.json");
  put(dir / "state.json", js);
  put(dir / "state.trunc_half.json", js.substr(0, js.size() / 2));
  auto with = [&](const std::string& key, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(js);
    if (v.is_discarded()) j.erase(key);
    else j[key] = v;
    return j.dump();
  };
  put(dir / "state.bad_format.json", with("format", "safetensors"));
  put(dir / "state.bad_version.json", with("version", 99));
  put(dir / "state.negative_epoch.json", with("epoch", -1));
  put(dir / "state.string_step.json", with("global_step", "12"));
  put(dir / "state.no_optimizers.json", with("optimizers", nlohmann::json(nlohmann::json::value_t::discarded)));
  put(dir / "state.bad_rng.json", with("rng", {{"seed", -5}, {"offset", 1.5}}));
  put(dir / "state.array.json", "[1, 2, 3]");
  put(dir / "state.empty_object.json", "{}");
}

void cli_corpus(const fs::path& dir) {
  auto line = [&](const std::string& name, std::vector<std::string> args) {
    std::string s;
    for (size_t i = 0; i < args.size(); ++i) s += (i ? std::string(1, '\0') : std::string()) + args[i];
    put(dir / name, s);
  };
  line("default", {});
  line("help", {"--help"});
  line("full", {"--data", "/usr/share/datasets/fashion-mnist", "--epochs", "2", "--batch-size", "64", "--lr", "0.001",
                "--seed", "7", "--accelerator", "cpu", "--devices", "1", "--strategy", "auto", "--precision",
                "32-true", "--num-workers", "2", "--out", "runs/x", "--no-progress-bar"});
  line("equals", {"--epochs=3", "--lr=1e-3", "--devices=0,1", "--strategy=ddp", "--precision=bf16-mixed"});
  line("resume", {"--resume", "runs/mnist/checkpoints/last", "--epochs", "5"});
  line("bad_number", {"--epochs", "zero"});
  line("negative", {"--batch-size", "-4", "--lr", "-1"});
  line("unknown", {"--frobnicate", "1"});
  line("missing_value", {"--data"});
  line("positional", {"extra", "args"});
  line("repeated", {"--seed", "1", "--seed", "18446744073709551615", "--epochs", "9223372036854775807"});
}

}  // namespace

// Small PNGs (gray, gray+alpha, RGB, RGBA) and JPEGs (gray, RGB) with their variants.
void image_corpus(const fs::path& dir) {
  auto pixels = [](int w, int h, int c) {
    std::vector<uint8_t> px;
    for (int i = 0; i < w * h * c; ++i) px.push_back(static_cast<uint8_t>((i * 37) % 251));
    return px;
  };
  const fs::path tmp = dir / "tmp.png";
  for (int c = 1; c <= 4; ++c) {
    data::testing::write_png(tmp.string(), 5, 4, c, pixels(5, 4, c));
    const std::string s = slurp(tmp);
    fs::remove(tmp);
    variants(dir, "c" + std::to_string(c) + "_5x4.png", s, 33);  // signature and IHDR
  }
  for (int c : {1, 3}) {
    const std::string s = data::testing::jpeg_bytes(9, 7, c, pixels(9, 7, c), 90);
    variants(dir, "c" + std::to_string(c) + "_9x7.jpg", s, s.size() / 2);  // the tables come first
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: fuzz_make_corpus <out-dir> [fashion-mnist-dir]\n";
    return 2;
  }
  const fs::path out = argv[1];
  const std::string mnist = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  for (const char* t : {"fuzz_idx", "fuzz_npy", "fuzz_safetensors", "fuzz_trainer_state", "fuzz_cli", "fuzz_image"})
    fs::create_directories(out / t);
  idx_corpus(out / "fuzz_idx", mnist);
  npy_corpus(out / "fuzz_npy");
  safetensors_corpus(out / "fuzz_safetensors");
  trainer_state_corpus(out / "fuzz_trainer_state");
  cli_corpus(out / "fuzz_cli");
  image_corpus(out / "fuzz_image");
  std::cout << "corpus written to " << out << "\n";
  return 0;
}
