"""The arguments of VLM-R1's six run scripts, as data: github.com/om-ai-lab/VLM-R1, run_scripts/*.sh (the
torchrun line and the grpo_jsonl.py arguments after it, as written). The scripts' shell variables are left as
{names} for the tests to bind: model_path, data_paths, image_folders, output_dir, the DeepSpeed file ({zero2},
{zero3}: its src/open-r1-multimodal/local_scripts/zero2.json and zero3.json); every other value is the script's."""

TORCHRUN = ('--nproc_per_node="8" --nnodes="1" --node_rank="0" --master_addr="127.0.0.1" --master_port="12349" '
            'src/open_r1/grpo_jsonl.py')

# run_grpo_rec.sh; is_reward_customized_from_vlm_module=True, TASK_TYPE="rec" in the script.
REC = (TORCHRUN + ' --use_vllm False --output_dir {output_dir} --resume_from_checkpoint True '
       '--model_name_or_path {model_path} --data_file_paths {data_paths} --image_folders {image_folders} '
       '--is_reward_customized_from_vlm_module True --task_type rec --per_device_train_batch_size 8 '
       '--gradient_accumulation_steps 2 --gradient_checkpointing true --logging_steps 1 --num_train_epochs 2 --bf16 '
       '--attn_implementation flash_attention_2 --run_name Qwen2.5-VL-3B-Instruct-rec --data_seed 42 --save_steps 100 '
       '--num_generations 8 --max_completion_length 2048 --reward_funcs accuracy format --beta 0.04 --report_to wandb '
       '--dataset-name this_is_not_used --deepspeed {zero3}')

SCRIPTS = {
    "run_grpo_rec.sh": REC,
    # run_grpo_rec_lora.sh: REC on zero2, and LoRA.
    "run_grpo_rec_lora.sh": REC.replace("{zero3}", "{zero2}") + (
        ' --learning_rate 1e-5 --use_peft true --lora_r 64 --lora_alpha 128 --lora_dropout 0.05 '
        '--lora_task_type CAUSAL_LM --freeze_vision_modules true'),
    # run_grpo_rec_internvl.sh: --max_anyres_num 6 after --task_type, zero2.
    "run_grpo_rec_internvl.sh": REC.replace("--task_type rec", "--task_type rec --max_anyres_num 6").replace(
        "{zero3}", "{zero2}"),
    # run_grpo_rec_more_params.sh: --epsilon_high 0.28 after --beta.
    "run_grpo_rec_more_params.sh": REC.replace("--beta 0.04", "--beta 0.04 --epsilon_high 0.28"),
    # run_grpo_gui.sh: is_reward_customized_from_vlm_module=False, reward_methods="all_match", TASK_TYPE="gui",
    # MAX_STEPS=1200.
    "run_grpo_gui.sh": (
        TORCHRUN + ' --use_vllm False --output_dir {output_dir} --resume_from_checkpoint True '
        '--model_name_or_path {model_path} --data_file_paths {data_paths} --image_folders {image_folders} '
        '--is_reward_customized_from_vlm_module False --reward_method all_match --task_type gui '
        '--per_device_train_batch_size 2 --gradient_accumulation_steps 2 --gradient_checkpointing true '
        '--logging_steps 1 --num_train_epochs 2 --max_steps 1200 --bf16 --attn_implementation flash_attention_2 '
        '--run_name GUI-multi-image --save_steps 400 --num_generations 8 --max_completion_length 2048 '
        '--reward_funcs accuracy format --beta 0.04 --report_to wandb --dataset-name not_used --deepspeed {zero3}'),
    # run_grpo_gui_defect_detection.sh: REC's arguments; is_reward_customized_from_vlm_module=False,
    # TASK_TYPE="gui" in the script.
    "run_grpo_gui_defect_detection.sh": REC.replace("--is_reward_customized_from_vlm_module True",
                                                    "--is_reward_customized_from_vlm_module False").replace(
        "--task_type rec", "--task_type gui"),
}
GUI = ("run_grpo_gui.sh", "run_grpo_gui_defect_detection.sh")
