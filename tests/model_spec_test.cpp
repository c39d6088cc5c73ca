// The --model grammar and the shape plan: presets expand to the documented layers, layer lists
// round-trip, bad specs and models that do not fit the data are refused with the option's name.
#include "runtime/model/model_spec.h"

#include <gtest/gtest.h>

#include "runtime/base/error.h"

using namespace lockstep;

namespace {

std::string message_of(const std::string& spec, const SampleShape& in = {28, 28, 1},
                       int outputs = 10) {
  try {
    plan_model(parse_model_spec(spec), in, outputs);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelSpec, PresetsExpandToTheirLayers) {
  EXPECT_EQ("dense", to_string(parse_model_spec("linear")));
  EXPECT_EQ("dense:256,relu,dense:128,relu,dense", to_string(parse_model_spec("mlp:256,128")));
  EXPECT_EQ("dense:256,relu,dense:128,relu,dense", to_string(parse_model_spec("mlp")));
  EXPECT_EQ("dense:64,relu,dense", to_string(parse_model_spec("mlp:64")));
  EXPECT_EQ("conv3x3:32,relu,maxpool2,conv3x3:64,relu,maxpool2,dense",
            to_string(parse_model_spec("cnn")));
}

TEST(ModelSpec, LayerListsRoundTripAndIgnoreSpaces) {
  for (std::string s :
       {"conv3x3:32,relu,maxpool2,dense:10", "conv5x5:8:2,flatten,dense", "dense:7,relu,dense:3"}) {
    ModelSpec m = parse_model_spec(s);
    EXPECT_EQ(s, to_string(m));
    EXPECT_EQ(to_string(m), to_string(parse_model_spec(to_string(m))));
  }
  EXPECT_EQ("conv3x3:32,relu,dense", to_string(parse_model_spec(" conv3x3: 32 , relu, dense ")));
  ModelSpec c = parse_model_spec("conv5x5:8:2");
  ASSERT_EQ(1u, c.layers.size());
  EXPECT_EQ("conv", c.layers[0].type);
  EXPECT_EQ((std::vector<int>{5, 8, 2}), c.layers[0].args);  // kernel, channels, stride
}

TEST(ModelSpec, BadSpecsNameTheOptionAndTheToken) {
  for (std::string s :
       {"", "resnet", "mlp:", "mlp:0", "mlp:-4", "dense:x", "conv3x3", "conv3x5:8", "convx:8",
        "maxpool", "relu:2", "dense,,relu", "dense,", "dense:99999999"}) {
    try {
      parse_model_spec(s);
      ADD_FAILURE() << "'" << s << "' was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string::npos, std::string(e.what()).find("--model")) << e.what();
    }
  }
  try {
    parse_model_spec("conv3x3:32,tanh,dense");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string::npos, std::string(e.what()).find("'tanh'")) << e.what();
  }
}

TEST(ModelSpec, CnnPlanOnFashionMnistShapes) {
  auto plan = plan_model(parse_model_spec("cnn"), {28, 28, 1}, 10);
  ASSERT_EQ(7u, plan.size());
  EXPECT_EQ((SampleShape{28, 28, 32}), plan[0].out);
  EXPECT_EQ(3u * 3 * 1 * 32 + 32, plan[0].params);
  EXPECT_EQ((SampleShape{14, 14, 32}), plan[2].out);
  EXPECT_EQ(3u * 3 * 32 * 64 + 64, plan[3].params);
  EXPECT_EQ((SampleShape{7, 7, 64}), plan[5].out);
  EXPECT_EQ((SampleShape{10}), plan[6].out);
  EXPECT_EQ(7u * 7 * 64 * 10 + 10, plan[6].params);
}

TEST(ModelSpec, StridedConvAndFlatten) {
  auto plan = plan_model(parse_model_spec("conv3x3:4:2,flatten,dense:5,relu,dense"), {9, 9, 2}, 3);
  EXPECT_EQ((SampleShape{5, 5, 4}), plan[0].out);
  EXPECT_EQ((SampleShape{100}), plan[1].out);
  EXPECT_EQ(0u, plan[1].params);
  EXPECT_EQ(100u * 5 + 5, plan[2].params);
  EXPECT_EQ((SampleShape{3}), plan.back().out);
}

TEST(ModelSpec, ModelsThatDoNotFitTheDataAreRefused) {
  // Convolution on vectors (the regression data).
  std::string m = message_of("cnn", {5}, 1);
  EXPECT_NE(std::string::npos, m.find("needs image samples")) << m;
  EXPECT_NE(std::string::npos, m.find("(5)")) << m;
  // The last layer must give the data's outputs.
  m = message_of("dense:12");
  EXPECT_NE(std::string::npos, m.find("10 outputs")) << m;
  m = message_of("conv3x3:8");
  EXPECT_NE(std::string::npos, m.find("end the model with 'dense'")) << m;
  // A pooling window larger than what reaches it.
  m = message_of("maxpool2,maxpool2,maxpool2,maxpool2,maxpool2,dense");
  EXPECT_NE(std::string::npos, m.find("layer 5")) << m;
  EXPECT_EQ("", message_of("mlp:32", {5}, 1));
}

TEST(ModelSpec, ChannelsFirstImagesAreNamedAsSuch) {
  // PyTorch's (N, 1, 28, 28) read as (H, W, C) = (1, 28, 28): the message says what the data
  // looks like and which layout is needed, not only that a pooling window does not fit.
  std::string m = message_of("cnn", {1, 28, 28}, 10);
  EXPECT_NE(std::string::npos, m.find("look channels-first (C, H, W)")) << m;
  EXPECT_NE(std::string::npos, m.find("(N, 28, 28, 1)")) << m;
  m = message_of("maxpool2,maxpool2,maxpool2,maxpool2,maxpool2,dense");  // channels last: no hint
  EXPECT_EQ(std::string::npos, m.find("channels-first")) << m;
}
