import pytest

from vlm_r1_table import IMAGES, TABLE
from vlmgrpo.boxes import NORM1000, RESIZED, answer_box, first_box, iou, parse_label, pixel_iou, to_absolute
from vlmgrpo.rewards import format_lenient_reward, format_reward, make_iou_reward

LABEL = [10.0, 20.0, 50.0, 60.0]


def as_messages(text):
    return [{"role": "assistant", "content": text}]


def iou_of(text, label=LABEL, size=(100, 100), space="absolute", resize=None, threshold=None, lenient=True):
    reward = make_iou_reward(space, resize, threshold, lenient=lenient)
    return reward(prompts=[None], completions=[as_messages(text)], solution=[label], image_size=[list(size)])[0]


@pytest.mark.parametrize("text", [
    '<think>the red one</think><answer>{"bbox_2d": [10, 20, 50, 60], "label": "car"}</answer>',
    '<think>x</think>\n<answer>\n```json\n[{"bbox_2d": [10, 20, 50, 60]}]\n```\n</answer>',
    "<answer>[10.0, 20.0, 50.0, 60.0]</answer>",
    "[10,20,50,60]",
])
def test_iou_exact_box_in_qwen_style_answers(text):
    assert iou_of(text) == pytest.approx(1.0)


def test_iou_uses_first_of_two_boxes():
    text = '<answer>[{"bbox_2d": [10, 20, 50, 60]}, {"bbox_2d": [0, 0, 5, 5]}]</answer>'
    assert iou_of(text) == pytest.approx(1.0)
    assert iou_of('<answer>[0, 0, 5, 5], [10, 20, 50, 60]</answer>') == 0.0


def test_iou_floats_and_partial_overlap():
    # [10,20,50,60] vs [30,20,70,60]: intersection 20x40, union 2*1600-800
    assert iou_of("<answer>[30.5, 20, 70.5, 60]</answer>", label=[10.5, 20, 50.5, 60]) == pytest.approx(800 / 2400)


def test_iou_no_box_scores_zero():
    assert iou_of("<think>no idea</think><answer>the car</answer>") == 0.0
    assert iou_of("") == 0.0


def test_iou_rescales_from_resized_input_to_original():
    # Original 1000x500 image fed to the model at 500x250: the model's box is half the label's.
    resize = lambda width, height: (width // 2, height // 2)  # noqa: E731
    text = '<answer>{"bbox_2d": [50, 25, 250, 125]}</answer>'
    assert iou_of(text, label=[100, 50, 500, 250], size=(1000, 500), space=RESIZED, resize=resize) == pytest.approx(1)


def test_iou_rescales_with_the_real_qwen_processor_sizes(tiny):
    from vlmgrpo.config.model_config import ModelConfig
    from vlmgrpo.models.loading import load_processor, resize_function

    resize = resize_function(load_processor(ModelConfig(model_name_or_path=tiny["model"], max_pixels=56 * 56)))
    assert resize(112, 112) == (56, 56)
    text = "<answer>[14, 14, 42, 42]</answer>"
    assert iou_of(text, label=[28, 28, 84, 84], size=(112, 112), space=RESIZED, resize=resize) == pytest.approx(1)


def test_iou_norm1000_answers():
    assert iou_of("<answer>[100, 200, 500, 600]</answer>", size=(100, 100), space=NORM1000) == pytest.approx(1.0)


def test_iou_threshold():
    half = "<answer>[30, 20, 70, 60]</answer>"  # IoU 1/3
    for lenient in (True, False):
        assert iou_of(half, threshold=0.5, lenient=lenient) == 0.0
        assert iou_of(half, threshold=0.3, lenient=lenient) == 1.0


def test_iou_accepts_plain_string_completions():
    reward = make_iou_reward("absolute")
    assert reward(prompts=["p"], completions=["<answer>[10,20,50,60]</answer>"], solution=[LABEL], image_size=[[100, 100]]) == [1.0]


@pytest.mark.parametrize("text,expected", [
    ('<think>look</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>', 1.0),
    ("<think>\nlook at it\n</think>\n\n<answer>\n[1.5, 2, 3, 4]\n</answer>\n", 1.0),
    ("<answer>[1, 2, 3, 4]</answer>", 0.0),  # missing think
    ("<think>look</think>[1, 2, 3, 4]", 0.0),  # missing answer tags
    ("<think>look</think><answer>the dog</answer>", 0.0),  # no box
    ("<think>a</think><answer>[1,2,3,4]</answer> trailing words", 0.0),
])
def test_format_lenient_reward(text, expected):
    assert format_lenient_reward(prompts=[None], completions=[as_messages(text)]) == [expected]


def test_box_helpers():
    assert first_box('{"bbox_2d": [1, 2.5, 3, 4]}') == (1.0, 2.5, 3.0, 4.0)
    assert answer_box("[9,9,9,9] <answer>[1,2,3,4]</answer>") == (1.0, 2.0, 3.0, 4.0)
    assert parse_label([1, 2, 3, 4]) == (1.0, 2.0, 3.0, 4.0)
    assert parse_label("<answer>[1,2,3,4]</answer>") == (1.0, 2.0, 3.0, 4.0)
    assert parse_label('[{"bbox_2d": [1, 2, 3, 4]}]') == (1.0, 2.0, 3.0, 4.0)
    assert parse_label("a dog") is None
    assert to_absolute((100, 100, 500, 500), NORM1000, (200, 100)) == (20, 10, 100, 50)
    assert iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0


def table_resize(width, height):
    """What the tiny Qwen2.5-VL processor does to the two table images (the score test uses the real one)."""
    return {(200, 100): (140, 56), (30, 20): (28, 28)}[(width, height)]


@pytest.mark.parametrize("row,text,expected_iou,expected_format,why", TABLE, ids=[t[4] for t in TABLE])
def test_default_rewards_give_vlm_r1_values(row, text, expected_iou, expected_format, why):
    size, label = IMAGES[row]
    reward = make_iou_reward(RESIZED, table_resize)
    assert reward(prompts=[None], completions=[as_messages(text)], solution=[label], image_size=[size])[0] == \
        pytest.approx(expected_iou, abs=1e-4)
    assert format_reward(prompts=[None], completions=[as_messages(text)]) == [float(expected_format)]


@pytest.mark.parametrize("text", ["<think>[10, 20, 50, 60]</think>", "<answer>[10.0, 20, 50, 60]</answer>",
                                  "<answer>[ 10, 20, 50, 60 ]</answer>"])
def test_lenient_iou_reads_what_vlm_r1_does_not(text):
    assert iou_of(text, lenient=False) == 0.0
    assert iou_of(text) == pytest.approx(1.0)


def test_pixel_iou_needs_more_than_one_pixel_of_overlap():
    assert pixel_iou((0, 0, 10, 10), (9, 0, 20, 10)) == 0.0  # one shared column
    assert iou((0, 0, 10, 10), (9, 0, 20, 10)) == pytest.approx(10 / 200)
    assert pixel_iou((0, 0, 10, 10), (8, 0, 20, 10)) == pytest.approx(20 / 200)
    assert pixel_iou((10, 20, 50, 60), (10, 20, 50, 60)) == 1.0
