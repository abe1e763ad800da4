// sweep_test.cpp — loom-sweep's parts: the unit-cube map, spec checks, command expansion, the
// Gaussian process and expected improvement, the metrics-file reader, and Bayesian optimisation
// against random search on Branin (the figure of issue 18: 24 trials, median of 5 seeds).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "gp.hpp"
#include "launcher.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/proc/process.hpp"
#include "loom/rt/proc/slurm.hpp"
#include "propose.hpp"
#include "spec.hpp"
#include "trial.hpp"

using namespace loom::sweep;

namespace {

const char* kSpec = R"(command: train --lr {lr} --batch {batch} --opt {opt} --out {metrics_file}
metric: test_accuracy
goal: max
trials: 8
parallel: 2
parameters:
  lr: {type: log, min: 0.001, max: 0.1}
  batch: {type: int, min: 16, max: 20}
  opt: {type: choice, values: [sgd, "adam w"]}
)";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kSpec;
  const auto pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

void expect_spec_error(const std::string& text, const std::string& what) {
  try {
    parse_spec(text);
    ADD_FAILURE() << "accepted a spec that should fail with: " << what;
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

double branin(double x1, double x2) {
  const double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) + 10 * (1 - t) * std::cos(x1) + 10;
}

double best_on_branin(bool bayes, unsigned long seed, int trials, int parallel) {
  const Space space({Param{"x1", ParamType::Float, -5, 10, {}}, Param{"x2", ParamType::Float, 0, 15, {}}});
  Proposer p(space, bayes, std::max(parallel, 5), seed);
  History h;
  double best = 1e300;
  while (static_cast<int>(h.done.size()) < trials) {
    const auto n = static_cast<size_t>(std::min<int>(parallel, trials - static_cast<int>(h.done.size())));
    for (const auto& u : p.propose(h, n)) {
      const Point v = space.decode(u);
      h.done.push_back(u);
      h.value.push_back(branin(v[0], v[1]));
      best = std::min(best, h.value.back());
    }
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST(Space, MapsEachTypeToTheUnitCubeAndBack) {
  const Spec s = parse_spec(kSpec);
  const Space space(s.params);
  ASSERT_EQ(space.dims(), 3u);
  Point v = space.decode({0.5, 0.0, 0.99});
  EXPECT_NEAR(v[0], 0.01, 1e-12);  // the log scale's midpoint is the geometric mean
  EXPECT_EQ(v[1], 16);
  EXPECT_EQ(v[2], 1);
  EXPECT_EQ(space.format(2, v[2]), "adam w");
  EXPECT_EQ(space.decode({0, 1, 0})[1], 20);  // every integer in [min, max] is reachable
  for (double u : {0.0, 0.13, 0.5, 0.77, 1.0}) {
    const auto snapped = space.snap({u, u, u});
    EXPECT_EQ(space.snap(snapped), snapped);  // a snapped point stays where it is
    EXPECT_NEAR(space.decode(snapped)[0], space.decode({u, u, u})[0], 1e-9);
  }
}

TEST(Spec, ReadsTheDefaults) {
  const Spec s = parse_spec(kSpec);
  EXPECT_TRUE(s.maximise);
  EXPECT_TRUE(s.bayes);
  EXPECT_EQ(s.trials, 8);
  EXPECT_EQ(s.init_trials, 7);   // 2 * dims + 1
  EXPECT_EQ(s.max_failures, 3);  // max(3, trials / 4)
}

TEST(Spec, RefusesBadSpecsWithOneClearError) {
  expect_spec_error(with("type: log", "type: exponential"), "unknown type 'exponential'");
  expect_spec_error(with("min: 16, max: 20", "min: 20, max: 16"), "min must be below max");
  expect_spec_error(with("min: 0.001", "min: 0"), "log parameter needs min > 0");
  expect_spec_error(with("  lr: {", "  [lr]: {"), "line 7, column 3: a value of the wrong kind");  // yaml-cpp's own
  expect_spec_error(with("--out {metrics_file}", "--out m.json"), "has no {metrics_file}");
  expect_spec_error(with("--opt {opt}", "--opt {optimiser}"), "{optimiser}, which is not a parameter");
  expect_spec_error(with("trials: 8", "trails: 8"), "unknown key 'trails'");
  expect_spec_error(with("goal: max", "goal: up"), "'goal'");
  // Optuna's and W&B's spellings are taken as they come.
  EXPECT_TRUE(parse_spec(with("goal: max", "goal: maximize")).maximise);
  EXPECT_FALSE(parse_spec(with("goal: max", "goal: minimize")).maximise);
  expect_spec_error(with("parallel: 2", "parallel: 9"), "'parallel'");
  expect_spec_error(with("values: [sgd, \"adam w\"]", "values: []"), "non-empty list");
  expect_spec_error(with("min: 16", "min: 16.5"), "integer min and max");
  // Integers a double or a 64-bit integer cannot hold: refused, not wrapped to -2^63.
  expect_spec_error(with("min: 16, max: 20", "min: 1e19, max: 2e19"), "within +-2^53");
  expect_spec_error(with("min: 16, max: 20", "min: -1e17, max: 20"), "within +-2^53");
  expect_spec_error(with("trials: 8", "trials: many"), "'trials': 'many' is not a valid value");
  expect_spec_error("command: [unclosed", "not valid YAML");
  expect_spec_error(std::string(kSpec) + "sbatch: [--array=0-3]\n", "--array is loom-sweep's");
}

TEST(Spec, ExpandsTheCommandQuotingWhatTheShellWouldSplit) {
  const Spec s = parse_spec(kSpec);
  const Space space(s.params);
  const std::string cmd = expand_command(s, space, {0.01, 17, 1}, "/tmp/a b/m.jsonl");
  EXPECT_EQ(cmd, "train --lr 0.01 --batch 17 --opt 'adam w' --out '/tmp/a b/m.jsonl'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

// A sweep folder whose name holds a newline and shell syntax: trial.sh's comment must not end
// there and run the rest (it printed INJECTED-42), and the folder is still the one it uses.
TEST(Launcher, WrapperScriptRunsNothingFromTheFolderName) {
  char base[] = "/tmp/loom-sweep-test-XXXXXX";
  ASSERT_NE(::mkdtemp(base), nullptr);
  const std::string dir = std::string(base) + "/a\necho INJECTED-$((6*7)) #'\"b";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  write_wrapper(dir);
  std::string out;
  // Without SLURM_ARRAY_TASK_ID the script stops at its first command: only a comment's
  // injected line could print anything before that.
  const int rc = loom::rt::run_program({"env", "-u", "SLURM_ARRAY_TASK_ID", "bash", dir + "/trial.sh"}, out);
  EXPECT_NE(rc, 0);
  EXPECT_EQ(out.find("INJECTED-42"), std::string::npos) << out;  // the name itself may be echoed
  EXPECT_NE(out.find("not an array task"), std::string::npos) << out;
  struct stat st{};
  ASSERT_EQ(::stat((dir + "/trial.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  std::string ignored;
  loom::rt::run_program({"rm", "-rf", base}, ignored);
}

// The one atomic write never follows what someone planted at a temporary name: the old
// `<path>.tmp` symlink made the controller overwrite its target.
TEST(AtomicWrite, NeverFollowsAPlantedSymlink) {
  char base[] = "/tmp/loom-atomic-test-XXXXXX";
  ASSERT_NE(::mkdtemp(base), nullptr);
  const std::string dir = base, victim = dir + "/victim", path = dir + "/x.json";
  std::ofstream(victim) << "precious\n";
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
  loom::rt::write_file_atomic(path, "{\"a\":1}\n", 0600);
  std::ifstream v(victim), x(path);
  std::string vs((std::istreambuf_iterator<char>(v)), {}), xs((std::istreambuf_iterator<char>(x)), {});
  EXPECT_EQ(vs, "precious\n");
  EXPECT_EQ(xs, "{\"a\":1}\n");
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // A folder it cannot write in: an error that names the file and the reason, nothing left.
  EXPECT_THROW(loom::rt::write_file_atomic(dir + "/missing/y.json", "x"), loom::rt::Error);
  std::string ignored;
  loom::rt::run_program({"rm", "-rf", base}, ignored);
}

// A program that exits but leaves a background child holding its output (a site's sbatch
// wrapper may) must not hang the caller; one that never answers is stopped at the deadline,
// with whatever it started.
TEST(RunProgram, ReturnsWhenTheProgramExitsAndStopsOneThatHangs) {
  std::string out;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(loom::rt::run_program({"bash", "-c", "sleep 5 & echo submitted 42"}, out), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(out, "submitted 42\n");
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(loom::rt::run_program({"bash", "-c", "sleep 30 & sleep 30"}, out, 300), 124);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(out.find("no answer within"), std::string::npos) << out;
  EXPECT_EQ(loom::rt::run_program({"sh", "-c", "echo to stderr >&2; exit 3"}, out), 3);
  EXPECT_EQ(out, "to stderr\n");
  EXPECT_EQ(loom::rt::run_program({"/nonexistent/program"}, out), 127);
}

TEST(GaussianProcess, InterpolatesItsDataAndIsUnsureFarFromIt) {
  std::mt19937_64 rng(1);
  Eigen::MatrixXd X(6, 1);
  Eigen::VectorXd y(6);
  for (int i = 0; i < 6; ++i) X(i, 0) = i / 10.0, y(i) = std::sin(6 * X(i, 0));
  GaussianProcess gp;
  gp.fit(X, y, true, rng);
  double m = 0, v = 0, m_far = 0, v_far = 0;
  gp.predict(X.row(3).transpose(), m, v);
  EXPECT_NEAR(m, gp.standardise(y(3)), 0.05);
  gp.predict(Eigen::VectorXd::Constant(1, 1.0), m_far, v_far);
  EXPECT_GT(v_far, 10 * v);
}

// A loss with a long tail of bad values (Rosenbrock's) is warped by an exponent below 1, one with a
// long tail of good values by one above; the warp keeps the order of the results.
TEST(GaussianProcess, WarpsALongTailAndKeepsTheOrder) {
  std::mt19937_64 rng(2);
  Eigen::MatrixXd X(12, 1);
  Eigen::VectorXd y(12);
  for (int i = 0; i < 12; ++i) X(i, 0) = i / 11.0, y(i) = std::pow(10.0, 4 * X(i, 0));  // 1 .. 10^4
  GaussianProcess gp;
  gp.fit(X, y, true, rng);
  EXPECT_LT(gp.warp_exponent(), 0.5);
  for (int i = 1; i < 12; ++i) EXPECT_LT(gp.standardise(y(i - 1)), gp.standardise(y(i)));
  gp.fit(X, -y, true, rng);
  EXPECT_GT(gp.warp_exponent(), 1.5);
  for (int i = 0; i < 12; ++i) y(i) = X(i, 0);  // evenly spread: little or no warp
  gp.fit(X, y, true, rng);
  EXPECT_NEAR(gp.warp_exponent(), 1.0, 0.5);
}

// With a dozen points in 6 dimensions the likelihood alone chose scales of 0.02 beside 20; the
// prior keeps them where a model can say something between its points.
TEST(GaussianProcess, LengthScalesStayInsideTheCubeFromFewPoints) {
  std::mt19937_64 rng(4);
  Eigen::MatrixXd X = (Eigen::MatrixXd::Random(9, 4).array() + 1) / 2;
  Eigen::VectorXd y(9);
  for (int i = 0; i < 9; ++i) {
    const Eigen::ArrayXd x = X.row(i).transpose().array() * 4 - 2;  // Rosenbrock on [-2, 2]^4
    y(i) = (100 * (x.tail(3) - x.head(3).square()).square() + (1 - x.head(3)).square()).sum();
  }
  GaussianProcess gp;
  gp.fit(X, y, true, rng);
  EXPECT_GT(gp.length_scales().minCoeff(), 0.05) << gp.length_scales().transpose();
  EXPECT_LT(gp.length_scales().maxCoeff(), 5.0) << gp.length_scales().transpose();
}

// A GP fitted to Branin at 8 random points of the unit square.
GaussianProcess branin_gp(unsigned long seed) {
  std::mt19937_64 rng(seed);
  Eigen::MatrixXd X = (Eigen::MatrixXd::Random(8, 2).array() + 1) / 2;
  Eigen::VectorXd y(8);
  for (int i = 0; i < 8; ++i) y(i) = branin(X(i, 0) * 15 - 5, X(i, 1) * 15);
  GaussianProcess gp;
  gp.fit(X, y, true, rng);
  return gp;
}

TEST(GaussianProcess, JointPosteriorMatchesThePointwiseOne) {
  const GaussianProcess gp = branin_gp(5);
  Eigen::MatrixXd P(3, 2);
  P << 0.1, 0.2, 0.1001, 0.2, 0.9, 0.9;
  Eigen::VectorXd mean;
  Eigen::MatrixXd cov;
  gp.joint(P, mean, cov);
  for (int i = 0; i < 3; ++i) {
    double m = 0, v = 0;
    gp.predict(P.row(i).transpose(), m, v);
    EXPECT_NEAR(mean(i), m, 1e-9);
    EXPECT_NEAR(cov(i, i), v, 1e-6);  // predict floors the variance at 1e-12
  }
  EXPECT_GT(cov(0, 1) / std::sqrt(cov(0, 0) * cov(1, 1)), 0.99);  // neighbours move together
  EXPECT_LT(std::abs(cov(0, 2)) / std::sqrt(cov(0, 0) * cov(2, 2)), 0.5);
}

// Points pending (proposed, still running) shape the next proposal through q-EI: a batch is not one
// point four times, and a pending point moves the next proposal away from where it would have gone.
TEST(Bayes, PendingTrialsShapeTheNextProposals) {
  const Space space({Param{"x1", ParamType::Float, -5, 10, {}}, Param{"x2", ParamType::Float, 0, 15, {}}});
  History h;
  std::mt19937_64 rng(6);
  for (int i = 0; i < 8; ++i) {
    std::vector<double> u = {std::uniform_real_distribution<double>(0, 1)(rng), std::uniform_real_distribution<double>(0, 1)(rng)};
    h.done.push_back(u), h.value.push_back(branin(u[0] * 15 - 5, u[1] * 15));
  }
  Proposer alone(space, true, 2, 7), with(space, true, 2, 7);
  const auto first = alone.propose(h, 1).front();
  const auto batch = with.propose(h, 4);
  for (size_t i = 0; i < batch.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      EXPECT_GT(std::hypot(batch[i][0] - batch[j][0], batch[i][1] - batch[j][1]), 0.01) << i << " beside " << j;
  History pending = h;
  pending.pending.push_back(first);
  Proposer after(space, true, 2, 7);
  const auto next = after.propose(pending, 1).front();
  EXPECT_GT(std::hypot(next[0] - first[0], next[1] - first[1]), 0.01);
}

TEST(ExpectedImprovement, GradientsMatchFiniteDifferences) {
  const GaussianProcess gp = branin_gp(3);
  const Eigen::Vector2d x(0.3, 0.6);
  double m = 0, v = 0;
  Eigen::VectorXd dm, dv;
  gp.predict(x, m, v, &dm, &dv);
  for (int d = 0; d < 2; ++d) {
    Eigen::Vector2d h = x;
    h(d) += 1e-6;
    double m2 = 0, v2 = 0;
    gp.predict(h, m2, v2);
    EXPECT_NEAR((m2 - m) / 1e-6, dm(d), 1e-3 * (1 + std::abs(dm(d))));
    EXPECT_NEAR((v2 - v) / 1e-6, dv(d), 1e-3 * (1 + std::abs(dv(d))));
  }
  double d_mean = 0, d_sd = 0;
  const double ei = expected_improvement(0.2, 0.09, 0.5, 0.0, &d_mean, &d_sd);
  EXPECT_NEAR((expected_improvement(0.2 + 1e-7, 0.09, 0.5, 0.0) - ei) / 1e-7, d_mean, 1e-5);
  EXPECT_GT(ei, 0.3);  // mean 0.3 below the best: at least the plain improvement
}

TEST(Metrics, ReadsTheLastLineThatHasTheMetric) {
  const std::string path = ::testing::TempDir() + "/metrics.jsonl";
  std::ofstream(path) << "{\"step\":1,\"test_accuracy\":0.5}\nnot json\n{\"test_accuracy\":\"high\"}\n"
                         "{\"event\":\"summary\",\"test_accuracy\":0.81}\n{\"step\":9}\n";
  EXPECT_DOUBLE_EQ(read_metric(path, "test_accuracy"), 0.81);
  EXPECT_THROW(read_metric(path, "loss"), std::runtime_error);
  EXPECT_THROW(read_metric(path + ".none", "loss"), std::runtime_error);
}

TEST(Bayes, BeatsRandomSearchOnBraninIn24Trials) {
  for (int parallel : {1, 4}) {
    std::vector<double> bayes, random;
    for (unsigned long seed = 1; seed <= 5; ++seed) {
      bayes.push_back(best_on_branin(true, seed, 24, parallel));
      random.push_back(best_on_branin(false, seed, 24, parallel));
    }
    std::printf("branin, 24 trials, %d in parallel: bayes median best %.3f, random %.3f (optimum 0.398)\n", parallel,
                median(bayes), median(random));
    EXPECT_LT(median(bayes), median(random));
    EXPECT_LT(median(bayes), 0.8);
  }
}

// The one Slurm client (rt::slurm), against stand-ins for sbatch, squeue and scancel on PATH
// that record their arguments: the ID from --parsable (a federation's "ID;cluster" too), Slurm's
// own words when it refuses, squeue's fields (a comment holding '|'), and "not found".
TEST(SlurmClient, SubmitsQueriesAndCancelsWithSlurmsOwnWords) {
  char tmpl[] = "/tmp/loom-slurm-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto tool = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir + "/" + name) << "#!/bin/sh\necho \"$@\" >>" << dir << "/" << name << ".args\n" << body << "\n";
    ::chmod((dir + "/" + name).c_str(), 0755);
  };
  tool("sbatch", "echo '4242;cluster'");
  tool("squeue", "printf '7_1|RUNNING|None|n1|1|loom:a|b\\n7_[2-3]|PENDING|JobArrayTaskLimit||N/A|loom:a|b\\n'");
  tool("scancel", "exit 0");
  const std::string path = ::getenv("PATH");
  ::setenv("PATH", (dir + ":" + path).c_str(), 1);
  namespace slurm = loom::rt::slurm;
  EXPECT_EQ(slurm::submit({"--job-name=x", "--array=0-3%2"}, "/s/trial.sh"), "4242");
  std::ifstream args(dir + "/sbatch.args");
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "--parsable --job-name=x --array=0-3%2 /s/trial.sh");
  const auto jobs = slurm::query({"-j", "7"});
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "7_1");
  EXPECT_EQ(jobs[0].array_task, "1");
  EXPECT_EQ(jobs[0].comment, "loom:a|b");
  EXPECT_EQ(jobs[1].reason, "JobArrayTaskLimit");
  EXPECT_TRUE(slurm::cancel("7", {"--batch", "--signal=TERM"}));
  std::ifstream cargs(dir + "/scancel.args");
  std::getline(cargs, line);
  EXPECT_EQ(line, "--batch --signal=TERM 7");
  tool("sbatch", "echo 'sbatch: error: Batch job submission failed: Invalid account or account/partition combination' >&2; exit 1");
  try {
    slurm::submit({}, "/s/x.sh");
    ADD_FAILURE() << "a refused submission returned";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sbatch failed (exit 1): sbatch: error: Batch job submission failed: Invalid account"),
              std::string::npos) << e.what();
  }
  tool("sbatch", "echo 'Submitted batch job 12'");  // without --parsable's form
  EXPECT_THROW(slurm::submit({}, "/s/x.sh"), loom::rt::Error);
  ::setenv("PATH", "/nonexistent", 1);
  try {
    slurm::submit({}, "/s/x.sh", "or --executor local");
    ADD_FAILURE() << "a missing sbatch returned";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sbatch: not found (is Slurm installed?); or --executor local"), std::string::npos)
        << e.what();
  }
  ::setenv("PATH", path.c_str(), 1);
  for (const char* f : {"sbatch", "squeue", "scancel", "sbatch.args", "squeue.args", "scancel.args"}) ::unlink((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}
