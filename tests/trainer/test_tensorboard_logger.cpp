// TensorBoardLogger and the event-file format: CRC-32C known answers, TFRecord framing and corruption
// detection, and a short fit read back record by record (steps, tags, values, hparams).
#include <unistd.h>

#include <chrono>
#include <regex>

#include <volt/trainer/loggers/tensorboard_logger.h>
#include <volt/trainer/loggers/tfevents.h>
#include "trainer/tfevents_reader.h"
#include "trainer/trainer_test_util.h"

using namespace volt;
using namespace volt::test;
namespace fs = std::filesystem;

namespace {

uint32_t crc32c_of(const std::string& s) { return crc32c_update(0, s.data(), s.size()); }

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The error read_tfrecords raises for `path`, or "" when it reads cleanly.
std::string read_error(const std::string& path) {
  try {
    read_tfrecords(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST(TfEvents, Crc32cKnownAnswers) {
  EXPECT_EQ(crc32c_of("123456789"), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c_of(""), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  EXPECT_EQ(crc32c_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c_of(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up.push_back(static_cast<char>(i));
    down.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c_of(down), 0x113FDB5Cu);
  // Extending a running CRC equals one pass.
  EXPECT_EQ(crc32c_update(crc32c_update(0, "12345", 5), "6789", 4), 0xE3069283u);
  // The TFRecord mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TfEvents, RecordFramingRoundTripsAndCorruptionIsDetected) {
  ScratchDir dir("tfrecord");
  const std::string path = (dir.path / "records").string();
  const std::string a = "first payload", b(300, 'x');
  const std::string good = tfrecord(a) + tfrecord(b) + tfrecord("");
  ASSERT_EQ(good.size(), 3 * 16 + a.size() + b.size());
  write_bytes(path, good);
  EXPECT_EQ(read_tfrecords(path), (std::vector<std::string>{a, b, ""}));

  struct Case {
    const char* what;
    size_t byte;  // flipped
    const char* error;
  };
  const size_t second = 16 + a.size();  // where the second record starts
  for (const Case& c : {Case{"length", second + 1, "record 1 at byte 29: length CRC mismatch"},
                        Case{"length CRC", second + 9, "record 1 at byte 29: length CRC mismatch"},
                        Case{"data", second + 12 + 150, "record 1 at byte 29: data CRC mismatch"},
                        Case{"data CRC", second + 12 + b.size() + 2, "record 1 at byte 29: data CRC mismatch"},
                        Case{"first data byte", 12, "record 0 at byte 0: data CRC mismatch"}}) {
    SCOPED_TRACE(c.what);
    std::string bad = good;
    bad[c.byte] = static_cast<char>(bad[c.byte] ^ 0x20);
    write_bytes(path, bad);
    EXPECT_EQ(read_error(path), c.error);
  }
  write_bytes(path, good.substr(0, good.size() - 3));
  EXPECT_EQ(read_error(path), "record 2 at byte " + std::to_string(2 * 16 + a.size() + b.size()) +
                                  ": truncated data");
}

TEST(TfEvents, EventMessagesDecode) {
  const TfEvent v = parse_event(file_version_event(1234.5));
  EXPECT_EQ(v.wall_time, 1234.5);
  EXPECT_EQ(v.file_version, "brain.Event:2");
  EXPECT_FALSE(v.has_summary);

  const TfEvent s = parse_event(scalars_event(99.25, 7, {{"loss", 0.5}, {"acc", 1.0 / 3.0}, {"zero", 0.0}}));
  EXPECT_EQ(s.wall_time, 99.25);
  EXPECT_EQ(s.step, 7);
  ASSERT_EQ(s.values.size(), 3u);
  EXPECT_EQ(s.values[0].tag, "acc");
  EXPECT_EQ(s.values[0].simple_value, static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(s.values[1].tag, "loss");
  EXPECT_EQ(s.values[1].simple_value, 0.5f);
  EXPECT_EQ(s.values[2].tag, "zero");
  EXPECT_TRUE(s.values[2].has_simple_value) << "a zero value is still written (it is a oneof member)";
  EXPECT_EQ(s.values[2].simple_value, 0.0f);
  // A step past 2^32 survives the varint.
  EXPECT_EQ(parse_event(scalars_event(0, int64_t{5} << 33, {{"x", 1}})).step, int64_t{5} << 33);
}

TEST(TensorBoardLogger, FitWritesTheLoggedScalarsAndHparams) {
  ScratchDir dir("tb_fit");
  auto tb = std::make_shared<TensorBoardLogger>(dir.str());
  TinyModule m;
  m.save_hyperparameters({{"lr", 0.1}, {"optimizer", "sgd"}, {"flag", true}, {"net", {{"depth", 3}}}});
  m.on_train_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("a", 0.5 * static_cast<double>(i) + 0.25);                                 // on_step
    mm.log("m", static_cast<double>(i + 1), {.on_step = false, .on_epoch = true, .reduce_fx = "sum"});
  };
  m.on_val_step = [](TinyModule& mm, const Batch&, int64_t i, const Tensor&) {
    mm.log("vx", 0.5 * static_cast<double>(i), {.reduce_fx = "max"});
  };
  auto o = quiet(dir.str());
  o.max_epochs = 2;
  o.loggers = {tb};
  const double start = now_seconds();
  Trainer t(o);
  t.fit(m, make_loader(10, 4), make_loader(10, 4));  // 3 training and 3 validation batches per epoch
  const double end = now_seconds();

  EXPECT_EQ(t.logger(), tb.get());
  const fs::path version_dir = dir.path / "lightning_logs" / "version_0";
  EXPECT_EQ(tb->log_dir(), version_dir.string());
  EXPECT_EQ(t.log_dir(), version_dir.string());
  EXPECT_EQ(tb->event_file(), "") << "finalize closed the file";
  EXPECT_TRUE(fs::exists(version_dir / "hparams.yaml"));
  const auto files = event_files(version_dir);
  ASSERT_EQ(files.size(), 1u);
  const std::regex name(R"(events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+))");
  std::smatch match;
  const std::string file = fs::path(files[0]).filename().string();
  ASSERT_TRUE(std::regex_match(file, match, name)) << file;
  EXPECT_NEAR(std::stod(match[1].str()), start, 2.0);
  EXPECT_EQ(match[3].str(), std::to_string(::getpid()));

  const std::vector<TfEvent> events = read_events(files[0]);  // checks every record's CRCs
  ASSERT_EQ(events.size(), 12u);  // the file version, the hparams, 10 rows
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_GE(events[i].wall_time, start - 1);
    EXPECT_LE(events[i].wall_time, end + 1);
    if (i > 0) EXPECT_GE(events[i].wall_time, events[i - 1].wall_time);
    if (i > 0) EXPECT_TRUE(events[i].file_version.empty());
  }

  // The hparams plugin's session start: one value, no scalar, the flattened hyperparameters.
  const TfEvent& hp = events[1];
  EXPECT_EQ(hp.step, 0);
  ASSERT_EQ(hp.values.size(), 1u);
  EXPECT_EQ(hp.values[0].tag, "_hparams_/session_start_info");
  EXPECT_FALSE(hp.values[0].has_simple_value);
  EXPECT_EQ(hp.values[0].plugin_name, "hparams");
  double start_time = 0;
  const auto hparams = parse_session_start_hparams(hp.values[0].plugin_content, &start_time);
  EXPECT_NEAR(start_time, hp.wall_time, 1e-6);
  ASSERT_EQ(hparams.size(), 5u);  // the module's four plus the Trainer's precision
  EXPECT_EQ(hparams.at("precision").kind, TfHparam::string);
  EXPECT_EQ(hparams.at("precision").string_value, "32-true");
  EXPECT_EQ(hparams.at("lr").kind, TfHparam::number);
  EXPECT_EQ(hparams.at("lr").number_value, 0.1);
  EXPECT_EQ(hparams.at("optimizer").kind, TfHparam::string);
  EXPECT_EQ(hparams.at("optimizer").string_value, "sgd");
  EXPECT_EQ(hparams.at("flag").kind, TfHparam::boolean);
  EXPECT_TRUE(hparams.at("flag").bool_value);
  EXPECT_EQ(hparams.at("net/depth").kind, TfHparam::number);
  EXPECT_EQ(hparams.at("net/depth").number_value, 3.0);

  // Then one event per logged row, in order: three step rows, the validation epoch row and the training epoch
  // row of each epoch ("epoch" is a scalar too).
  using Row = std::pair<int64_t, std::map<std::string, float>>;
  const std::vector<Row> want = {
      {0, {{"a", 0.25f}, {"epoch", 0.f}}}, {1, {{"a", 0.75f}, {"epoch", 0.f}}}, {2, {{"a", 1.25f}, {"epoch", 0.f}}},
      {2, {{"epoch", 0.f}, {"vx", 1.0f}}}, {2, {{"epoch", 0.f}, {"m", 6.0f}}},
      {3, {{"a", 0.25f}, {"epoch", 1.f}}}, {4, {{"a", 0.75f}, {"epoch", 1.f}}}, {5, {{"a", 1.25f}, {"epoch", 1.f}}},
      {5, {{"epoch", 1.f}, {"vx", 1.0f}}}, {5, {{"epoch", 1.f}, {"m", 6.0f}}},
  };
  std::vector<Row> got;
  for (size_t i = 2; i < events.size(); ++i) {
    Row r{events[i].step, {}};
    for (const auto& v : events[i].values) {
      EXPECT_TRUE(v.has_simple_value) << v.tag;
      EXPECT_TRUE(v.plugin_name.empty()) << v.tag;
      r.second[v.tag] = v.simple_value;
    }
    got.push_back(r);
  }
  EXPECT_EQ(got, want);

  // A flipped byte anywhere in the middle of the file is caught by a CRC.
  std::string bytes = read_bytes(files[0]);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
  const std::string corrupted = (dir.path / "corrupted").string();
  write_bytes(corrupted, bytes);
  EXPECT_NE(read_error(corrupted).find("CRC mismatch"), std::string::npos) << read_error(corrupted);
}

TEST(TensorBoardLogger, QueueIsWrittenEveryMaxQueueEventsAndOnSave) {
  ScratchDir dir("tb_queue");
  TensorBoardLogger tb(dir.str(), {.name = "exp", .version = 4, .max_queue = 3, .flush_secs = 1e9});
  EXPECT_EQ(tb.log_dir(), (dir.path / "exp" / "version_4").string());
  EXPECT_FALSE(fs::exists(dir.path / "exp")) << "nothing is written before the first event";
  tb.log_metrics({{"x", 1}}, 0);
  tb.log_metrics({{"x", 2}}, 1);
  ASSERT_NE(tb.event_file(), "");
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 0u) << "two events are still queued";
  tb.log_metrics({{"x", 3}}, 2);
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 4u) << "the third event writes the queue";
  tb.log_metrics({{"x", 4}}, 3);
  EXPECT_EQ(read_tfrecords(tb.event_file()).size(), 4u);
  tb.save();
  const auto events = read_events(tb.event_file());
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[4].step, 3);
  EXPECT_EQ(events[4].values.at(0).simple_value, 4.0f);

  // finalize closes the file; a later event starts a new one that again begins with the file version.
  const std::string first = tb.event_file();
  tb.finalize(RunStatus::success);
  EXPECT_EQ(tb.event_file(), "");
  tb.log_metrics({{"y", 5}}, 9);
  tb.finalize(RunStatus::success);
  const auto files = event_files(dir.path / "exp" / "version_4");
  ASSERT_EQ(files.size(), 2u);
  const std::string second = files[0] == first ? files[1] : files[0];
  const auto later = read_events(second);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].file_version, "brain.Event:2");
  EXPECT_EQ(later[1].step, 9);
  EXPECT_EQ(later[1].values.at(0).tag, "y");
}

TEST(TensorBoardLogger, ErrorsNameTheProblem) {
  VOLT_EXPECT_ERROR(TensorBoardLogger("/tmp", {.max_queue = 0}), "TensorBoardLogger", "max_queue=0");
  VOLT_EXPECT_ERROR(TensorBoardLogger("/tmp", {.version = -2}), "TensorBoardLogger", "version=-2");
  VOLT_EXPECT_ERROR(TensorBoardLogger(""), "TensorBoardLogger", "root directory is empty");
  TensorBoardLogger tb("/dev/null/runs");
  VOLT_EXPECT_ERROR((tb.log_metrics({{"x", 1}}, 0)), "TensorBoardLogger", "/dev/null/runs/lightning_logs/version_0",
                    "cannot create");
}
